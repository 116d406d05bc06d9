//! vmtax-probe: the measuring agent of vmtax. It measures and prints `vmtax.probe/1` JSON
//! Lines on stdout; diagnostics go to stderr. Exit codes: 0 ok, 1 a run failed / timed out /
//! was interrupted, 2 usage error (one line on stderr).

mod affinity;
mod clock;
#[cfg(target_arch = "x86_64")]
mod cpuid;
mod env;
mod exits;
mod kvmstats;
mod output;
mod params;
mod pid1;
mod probes;
mod run;
mod serve;
mod stats;
mod watchdog;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "vmtax-probe", version, about = "vmtax measuring agent: prints vmtax.probe/1 JSON Lines")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Text,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the probes. Example: vmtax-probe list --format json
    List {
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Print the environment fingerprint. Example: vmtax-probe env --format json
    Env {
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Run a probe and stream vmtax.probe/1 JSONL. Example: vmtax-probe run cpuid --runs 5 --cpus 1
    Run {
        /// Probe name (see `list`)
        probe: String,
        /// Number of runs (default: the probe's)
        #[arg(long)]
        runs: Option<u32>,
        /// Measured iterations per run, at most (default: the probe's)
        #[arg(long)]
        iterations: Option<u64>,
        /// Seconds per run, at most: a run stops at --iterations or --duration, whichever first
        #[arg(long)]
        duration: Option<f64>,
        /// Warm-up iterations per run, emitted with "warmup": true
        #[arg(long)]
        warmup: Option<u64>,
        /// CPUs to pin to, e.g. 0 or 0,1 or 0-3
        #[arg(long)]
        cpus: Option<String>,
        /// Probe parameter key=value (repeatable)
        #[arg(long = "param", value_name = "KEY=VALUE")]
        params: Vec<String>,
        /// Stop everything after this many seconds (end status "timeout")
        #[arg(long)]
        timeout: Option<f64>,
        /// TSC ticks per second, as this machine's `env` found them: skips the 50 ms calibration
        #[arg(long, value_name = "HZ")]
        tsc_hz: Option<f64>,
        /// Leave the nesting estimate (3,000 timed CPUIDs) out of the header's env: `env` has it
        #[arg(long)]
        brief_env: bool,
    },
    /// Count a KVM guest's VM exits by reason (root, tracefs). Example: vmtax-probe exits start --qemu auto
    Exits {
        #[command(subcommand)]
        action: ExitsCmd,
    },
    /// Sample the machine's interference (clock, steal, other CPU use, runnable tasks) as one JSON line. Example: vmtax-probe noise --window 0.05
    Noise {
        /// Seconds to sample over
        #[arg(long, default_value_t = 0.05)]
        window: f64,
    },
    /// Serve requests on a virtio-serial port or tty. Example: vmtax-probe serve --device /dev/vport0p1
    Serve {
        #[arg(long)]
        device: String,
    },
    /// Serve tcp_rr/tcp_stream/tcp_maerts clients of other agents. Example: vmtax-probe netserver --bind 0.0.0.0:12865
    Netserver {
        #[arg(long, default_value = "0.0.0.0:12865")]
        bind: String,
        /// Exit once this many clients have come and gone (0: serve until killed)
        #[arg(long, default_value_t = 0)]
        clients: u64,
    },
    /// Be one forwarder of a relay ring that spans machines: accept, connect to --next, pass
    /// every message on. Example: vmtax-probe relay-forward --bind 127.0.0.1:7200 --next 127.0.0.1:7100
    RelayForward {
        #[arg(long)]
        bind: String,
        #[arg(long)]
        next: String,
    },
    /// Print a TCP port free on this machine's loopback now, for a server the controller is
    /// about to start here. Example: vmtax-probe free-port
    FreePort,
    /// Run a guest's QEMU as a child and kill it, and remove its scratch directory, when the
    /// controller that holds the pipe's write end exits, however. Example:
    /// vmtax-probe watchdog --fd 3 --dir vmtax-qemu-x -- qemu-system-x86_64 ...
    Watchdog {
        /// The read end of the controller's pipe
        #[arg(long)]
        fd: i32,
        /// The guest's scratch directory (its name starts with vmtax-)
        #[arg(long)]
        dir: String,
        /// The command to run: QEMU and its arguments
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

#[derive(Subcommand)]
enum ExitsCmd {
    /// Set up in-kernel histograms of kvm_exit/kvm_entry for a guest's vCPU threads
    Start {
        /// The guest's qemu-system process: auto (the only one) or its PID
        #[arg(long)]
        qemu: Option<String>,
        /// Thread ids to record besides (or instead of) the qemu vCPU threads (repeatable)
        #[arg(long = "pid")]
        pids: Vec<u32>,
        /// Where tracefs is mounted (default: /sys/kernel/tracing, then /sys/kernel/debug/tracing)
        #[arg(long)]
        tracefs: Option<String>,
        /// Mount tracefs on /sys/kernel/tracing if it is not mounted (for vmtax's own guests)
        #[arg(long)]
        mount: bool,
        /// Entries per histogram (the kernel's default is 2048)
        #[arg(long)]
        size: Option<u32>,
        /// Count exits only, without their handling time (one trigger instead of four)
        #[arg(long)]
        no_time: bool,
    },
    /// Print KVM's own per-vCPU counters of the guest (QMP query-stats; no tracing) as one
    /// JSON object. Example: vmtax-probe exits stats --qemu auto
    Stats {
        /// The guest's qemu-system process: auto (the only one) or its PID
        #[arg(long)]
        qemu: Option<String>,
        /// Its QMP socket (default: the -qmp unix:PATH on its command line)
        #[arg(long)]
        qmp: Option<String>,
    },
    /// Print the profile as one JSON object and remove what start set up
    Stop {
        #[arg(long)]
        tracefs: Option<String>,
    },
}

fn usage_error(msg: &str) -> ! {
    eprintln!("vmtax-probe: error: {}", msg.lines().next().unwrap_or("invalid usage"));
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if pid1::is_pid1() {
        pid1::main(&args[1..]);
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                std::process::exit(0);
            }
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid usage").trim_start_matches("error: ").to_string();
            usage_error(&first);
        }
    };
    let code = match cli.cmd {
        Cmd::List { format } => {
            let infos: Vec<_> = probes::all().iter().map(|p| p.spec().info()).collect();
            match format {
                Format::Json => println!("{}", serde_json::to_string(&infos).expect("serializable")),
                Format::Text => {
                    for i in infos {
                        println!("{:<10} {:<7} {}", i.name, i.unit, i.summary);
                        for p in i.params {
                            let default = serde_json::to_string(&p.default).unwrap_or_default();
                            println!("{:<10}   --param {}={}  {}", "", p.name, default.trim_matches('"'), p.help);
                        }
                    }
                }
            }
            0
        }
        Cmd::Env { format } => {
            let f = env::fingerprint();
            match format {
                Format::Json => println!("{}", serde_json::to_string(&f).expect("serializable")),
                Format::Text => print!("{}", env::to_text(&f)),
            }
            0
        }
        Cmd::Run { probe, runs, iterations, duration, warmup, cpus, params, timeout, tsc_hz, brief_env } => {
            let opts =
                run::RunOpts { probe, runs, iterations, duration, warmup, cpus, params, timeout, tsc_hz, brief_env };
            match run::plan(&opts) {
                Ok(p) => run::execute(p),
                Err(e) => usage_error(&e.to_string()),
            }
        }
        Cmd::Exits { action: ExitsCmd::Start { qemu, pids, tracefs, mount, size, no_time } } => {
            exits::start(&exits::StartOpts { qemu, pids, tracefs, mount, size, timed: !no_time })
        }
        Cmd::Exits { action: ExitsCmd::Stop { tracefs } } => exits::stop(tracefs.as_deref()),
        Cmd::Exits { action: ExitsCmd::Stats { qemu, qmp } } => kvmstats::stats(qemu.as_deref(), qmp.as_deref()),
        Cmd::Netserver { bind, clients } => match probes::net::netserver(&bind, clients) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("vmtax-probe: error: netserver: {e}");
                1
            }
        },
        Cmd::RelayForward { bind, next } => match probes::relay::forward(&bind, &next) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("vmtax-probe: error: relay-forward: {e}");
                1
            }
        },
        Cmd::FreePort => match probes::net::listen_loopback().and_then(|l| Ok(l.local_addr()?)) {
            Ok(addr) => {
                println!("{}", addr.port());
                0
            }
            Err(e) => {
                eprintln!("vmtax-probe: error: free-port: {e}");
                1
            }
        },
        Cmd::Noise { window } => {
            if !(window.is_finite() && (0.0..=60.0).contains(&window)) {
                usage_error(&format!("--window must be between 0 and 60 seconds, got {window}"));
            }
            println!("{}", probes::noise::sample(window));
            0
        }
        Cmd::Watchdog { fd, dir, command } => match watchdog::run(fd, &dir, &command) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("vmtax-probe: error: watchdog: {e}");
                e.exit_code()
            }
        },
        Cmd::Serve { device } => {
            let reconnect = device.rsplit('/').next().is_some_and(|n| n.starts_with("vport"));
            match serve::serve(&device, reconnect) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("vmtax-probe: error: serve: {e}");
                    1
                }
            }
        }
    };
    std::process::exit(code);
}
