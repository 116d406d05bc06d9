-- Run a stock sysbench script and record every event's (transaction's) latency.
-- sysbench itself only reports a histogram; vmtax keeps every raw value. The script to wrap
-- is $VMTAX_SB_SCRIPT; each worker thread writes "end_ns latency_ns" lines to
-- $VMTAX_SB_OUT.<thread id> when it finishes. The clock is CLOCK_MONOTONIC through LuaJIT's
-- FFI, which costs well under a microsecond per transaction.
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } vmtax_ts;
int clock_gettime(int clk, vmtax_ts *tp);
]]
dofile(os.getenv("VMTAX_SB_SCRIPT"))

local ts = ffi.new("vmtax_ts")
local function now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) * 1000000000 + tonumber(ts.tv_nsec)
end

local lat, ends = {}, {}
local inner_event = event
function event(...)
  local t0 = now()
  inner_event(...)
  local t1 = now()
  lat[#lat + 1] = t1 - t0
  ends[#ends + 1] = t1
end

local inner_done = thread_done
function thread_done(...)
  local f = assert(io.open(os.getenv("VMTAX_SB_OUT") .. "." .. sysbench.tid, "w"))
  for i = 1, #lat do
    f:write(string.format("%d %d\n", ends[i], lat[i]))
  end
  f:close()
  if inner_done then
    inner_done(...)
  end
end
