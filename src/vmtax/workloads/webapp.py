"""webapp: study B's three tiers as real servers, each started in a guest of its own.

- **db**: MariaDB from an empty data directory on the guest's scratch disk (the same server
  flags as the oltp workload, listening on every address so that QEMU's port forward reaches
  it), with table ``sbtest1`` loaded by ``sysbench oltp_read_write prepare``;
- **app**: lighttpd with PHP over FastCGI (``php-cgi``) serving ``app.php``: one page view
  is a point select and a 10-row range select on the db tier's ``sbtest1`` through mysqli,
  rendered as a small HTML page;
- **web**: lighttpd serving a static page itself and proxying ``/app.php`` to the app tier
  (mod_proxy).

Every tier listens on guest port ``PORT``, which QEMU forwards from a port of this machine's
loopback; a tier reaches the next one at ``10.0.2.2:<that port>``. So the tiers boot db,
app, web, and each is told where the previous one listens. A tier starts from its
script in the image (busybox sh), which leaves the server running in the guest (under ``setsid``,
so that the end of the agent's request, which kills its process group, does not stop it) and
prints
``ready <uptime>`` lines (start, server up, serving) for the agent's ``exec`` probe; the web
tier's last check is a GET of ``/app.php`` through all three tiers.

Only the sweep's triplet guests carry PHP (``guest_binaries``/``guest_files`` go into their
image alone), so that the other guest images keep their size.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from vmtax.errors import VmtaxError
from vmtax.targets.qemu import FORWARDED_PORTS
from vmtax.workloads.oltp import MARIADBD, mariadbd_flags, sysbench_conn

#: Where the tiers' scripts, pages and php.ini sit in the guest image.
GUEST_DIR = Path("/srv/vmtax-webapp")
#: The guest port every tier listens on (one of the ports a user network forwards: 7100).
PORT = FORWARDED_PORTS[0]
#: Where a tier keeps its data, configuration and logs: the guest's /tmp (the db's is its
#: scratch disk).
GUEST_WORKDIR = "/tmp/vmtax-webapp"  # noqa: S108 - inside the guest, which is vmtax's alone
#: The page one request of a client gets, through the web tier.
PAGE = "/app.php"
LIGHTTPD = "/usr/sbin/lighttpd"
#: lighttpd loads mod_proxy at run time (FastCGI is built into Debian's lighttpd).
MOD_PROXY = "/usr/lib/lighttpd/mod_proxy.so"
#: The PHP extensions app.php needs (mysqli over mysqlnd) and opcache, loaded at run time.
PHP_EXTENSIONS = ("mysqlnd.so", "mysqli.so", "opcache.so")
PHP_PACKAGES = "php-cgi php-mysql"


class PhpMissing(VmtaxError):
    """This machine has no php-cgi (or no mysqli for it) to put into the guests."""


def php_cgi() -> Path:
    """The php-cgi binary, resolved (``/usr/bin/php-cgi8.2`` on Debian bookworm)."""
    found = shutil.which("php-cgi")
    if not found:
        raise PhpMissing(f"php-cgi not found: install {PHP_PACKAGES}")
    return Path(found).resolve()


def extension_dir(php: Path) -> Path:
    """Where this php-cgi loads its extensions from, as it says itself."""
    out = subprocess.run(
        [str(php), "-n", "-q"],
        input='<?php echo ini_get("extension_dir");',
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    where = Path(out.stdout.strip() or "/nonexistent")
    if not (where / "mysqli.so").is_file():
        raise PhpMissing(f"{php} has no mysqli extension in {where}: install {PHP_PACKAGES}")
    return where


def guest_binaries() -> tuple[str, ...]:
    """php-cgi, its extensions and lighttpd's mod_proxy; the image adds the libraries each
    loads (ldd), the extensions' included."""
    php = php_cgi()
    ext = extension_dir(php)
    return (str(php), *(str(ext / name) for name in PHP_EXTENSIONS), MOD_PROXY)


def php_ini(ext: Path) -> str:
    """The base php.ini; the app tier's script appends where the db tier is."""
    return "\n".join(
        [
            f'extension_dir = "{ext}"',
            *(f"extension = {name}" for name in PHP_EXTENSIONS if name != "opcache.so"),
            "zend_extension = opcache.so",
            "opcache.enable = 1",
            "display_errors = Off",
            "log_errors = On",
            "mysqli.default_user = root",
            "",
        ]
    )


APP_PHP = r"""<?php
// vmtax triplet, app tier: one page view is a point select and a 10-row range select on
// the db tier's sbtest1 (a random row unless ?id= names one), rendered as HTML.
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
$rows = max(10, (int) get_cfg_var('vmtax.rows'));
$id = isset($_GET['id']) ? max(1, min($rows - 9, (int) $_GET['id'])) : random_int(1, $rows - 9);
$db = new mysqli(ini_get('mysqli.default_host'), 'root', '', 'sbtest',
                 (int) ini_get('mysqli.default_port'));
$one = $db->query("SELECT c, @@server_id AS server FROM sbtest1 WHERE id = $id")->fetch_assoc();
$range = $db->query("SELECT id, k, pad FROM sbtest1 WHERE id BETWEEN $id AND $id + 9 ORDER BY id");
$page = "<!doctype html>\n<title>vmtax triplet</title>\n";
$page .= "<p id=\"row\">row $id: " . htmlspecialchars($one['c']) . "</p>\n";
$page .= "<p id=\"server\">db server " . $one['server'] . "</p>\n<table>\n";
while ($r = $range->fetch_assoc()) {
    $page .= "<tr><td>{$r['id']}</td><td>{$r['k']}</td><td>" . htmlspecialchars($r['pad'])
        . "</td></tr>\n";
}
$page .= "</table>\n";
$db->close();
// The agent's client reads bodies by their length: send it rather than chunks.
header('Content-Type: text/html');
header('Content-Length: ' . strlen($page));
echo $page;
"""

INDEX_HTML = "<!doctype html>\n<title>vmtax triplet</title>\n<p>web tier</p>\n"

#: What every tier's script starts with: busybox, the guest's uptime as the clock, a wait
#: for a server's socket or port, and the first ``ready`` line.
_PRELUDE = """bb=/bin/busybox
here=${0%/*}
up() { $bb cut -d' ' -f1 /proc/uptime; }
fail() { echo "$1: $($bb grep -v '^ *$' "$2" 2>/dev/null | $bb tail -n 1)" >&2; exit 1; }
# wait_for TEST PID LOG WHAT: until TEST succeeds, while PID lives (30 s at most).
wait_for() {
    n=0
    until eval "$1"; do
        $bb kill -0 "$2" 2>/dev/null || fail "$4 exited" "$3"
        [ $n -lt 300 ] || fail "$4 did not start within 30 s" "$3"
        $bb sleep 0.1
        n=$((n + 1))
    done
}
echo "ready $(up)"
"""


def db_script() -> str:
    """start-db.sh PORT SERVER_ID ROWS BUFFER_MB DIR: MariaDB on PORT (all addresses) with
    ``--server-id`` SERVER_ID (app.php shows it: a page proves it came from this server),
    then ROWS rows of sbtest1."""
    flags = [
        "--bind-address=0.0.0.0" if f.startswith("--bind-address=") else f
        for f in mariadbd_flags('"$dir/data"', '"$port"', "${buffer}M", "root")
    ]
    conn = " ".join(sysbench_conn("mariadb", '"$port"'))
    return f"""# vmtax triplet, db tier: MariaDB from an empty data directory, sbtest1 loaded.
port=$1 id=$2 rows=$3 buffer=$4 dir=$5
{_PRELUDE}$bb mkdir -p "$dir/data/sbtest" || exit 1
$bb setsid {MARIADBD} {" ".join(flags)} --server-id="$id" \\
    </dev/null >"$dir/server.log" 2>&1 &
pid=$!
wait_for '[ -S "$dir/data/mysqld.sock" ]' $pid "$dir/server.log" mariadbd
echo "ready $(up)"
/usr/bin/sysbench --tables=1 --table-size="$rows" {conn} oltp_read_write prepare \\
    >"$dir/prepare.log" 2>&1 || fail "sysbench prepare failed" "$dir/prepare.log"
echo "ready $(up)"
"""


#: What the app and web tiers' lighttpd configurations share (shell variables: the script's).
_LIGHTTPD_COMMON = """server.document-root = "$here/www"
server.bind = "0.0.0.0"
server.port = $port
server.errorlog = "$dir/error.log"
server.pid-file = "$dir/lighttpd.pid"
server.max-keep-alive-requests = 1000000
server.max-keep-alive-idle = 600
"""

#: Starting either tier's lighttpd (left running under setsid) and waiting until it serves;
#: ``$page`` is then the app's page through it.
_START_LIGHTTPD = f"""\
$bb setsid {LIGHTTPD} -D -f "$dir/lighttpd.conf" </dev/null >"$dir/server.log" 2>&1 &
pid=$!
page="http://127.0.0.1:$port/app.php?id=1"
wait_for '$bb wget -q -O /dev/null http://127.0.0.1:$port/' $pid "$dir/server.log" lighttpd
echo "ready $(up)\""""


def app_script(php: Path) -> str:
    """start-app.sh PORT DB_HOST DB_PORT ROWS CHILDREN DIR: lighttpd on PORT running
    CHILDREN php-cgi processes (FastCGI) for app.php, which queries DB_HOST:DB_PORT."""
    return f"""# vmtax triplet, app tier: lighttpd + php-cgi (FastCGI) serving app.php.
port=$1 db_host=$2 db_port=$3 rows=$4 children=$5 dir=$6
{_PRELUDE}$bb mkdir -p "$dir" || exit 1
{{ $bb cat "$here/php.ini"
  echo "error_log = $dir/php.log"
  echo "mysqli.default_host = $db_host"
  echo "mysqli.default_port = $db_port"
  echo "vmtax.rows = $rows"
}} >"$dir/php.ini"
$bb cat >"$dir/lighttpd.conf" <<EOF
{_LIGHTTPD_COMMON}server.modules = ("mod_fastcgi")
index-file.names = ("index.html")
fastcgi.server = (".php" => ((
    "socket" => "$dir/php.sock",
    "bin-path" => "{php}",
    "max-procs" => 1,
    "bin-environment" => (
        "PHPRC" => "$dir", "PHP_INI_SCAN_DIR" => "",
        "PHP_FCGI_CHILDREN" => "$children", "PHP_FCGI_MAX_REQUESTS" => "0",
    ),
)))
EOF
{_START_LIGHTTPD}
$bb wget -q -O "$dir/page.html" "$page" || fail "GET $page failed" "$dir/php.log"
echo "ready $(up)"
"""


def web_script() -> str:
    """start-web.sh PORT APP_HOST APP_PORT DIR: lighttpd on PORT serving index.html and
    proxying /app.php to APP_HOST:APP_PORT."""
    return f"""# vmtax triplet, web tier: lighttpd serving a static page, proxying /app.php.
port=$1 app_host=$2 app_port=$3 dir=$4
{_PRELUDE}$bb mkdir -p "$dir" || exit 1
$bb cat >"$dir/lighttpd.conf" <<EOF
{_LIGHTTPD_COMMON}server.modules = ("mod_proxy")
index-file.names = ("index.html")
\\$HTTP["url"] =~ "^/app\\\\.php" {{
    proxy.server = ("" => (("host" => "$app_host", "port" => $app_port)))
}}
EOF
{_START_LIGHTTPD}
$bb wget -q -O "$dir/page.html" "$page" || fail "GET $page through the app tier failed" \\
    "$dir/error.log"
echo "ready $(up)"
"""


#: steal.sh INTERVAL COUNT: COUNT readings of the guest's /proc/stat, INTERVAL s apart, each
#: three lines: uptime, steal ticks and all ticks (of all its CPUs).
STEAL_SCRIPT = """# vmtax sweep: the guest's own steal time, read at a fixed interval.
bb=/bin/busybox
i=0
while [ $i -lt "$2" ]; do
    read -r _ user nice system idle iowait irq softirq steal _ </proc/stat
    echo "stat $($bb cut -d' ' -f1 /proc/uptime)"
    echo "stat $steal"
    echo "stat $((user + nice + system + idle + iowait + irq + softirq + steal))"
    i=$((i + 1))
    if [ $i -lt "$2" ]; then $bb sleep "$1"; fi
done
"""


def script(tier: str) -> str:
    return str(GUEST_DIR / f"start-{tier}.sh")


STEAL = str(GUEST_DIR / "steal.sh")


def guest_files() -> dict[str, bytes]:
    """The tiers' scripts, pages and php.ini, by path in the guest (no leading /)."""
    php = php_cgi()
    files = {
        "start-db.sh": db_script(),
        "start-app.sh": app_script(php),
        "start-web.sh": web_script(),
        "steal.sh": STEAL_SCRIPT,
        "php.ini": php_ini(extension_dir(php)),
        "www/app.php": APP_PHP,
        "www/index.html": INDEX_HTML,
    }
    return {f"{str(GUEST_DIR)[1:]}/{rel}": text.encode() for rel, text in files.items()}


def tier_command(
    tier: str,
    *,
    backend: tuple[str, int] = ("", 0),
    server_id: int = 1,
    rows: int = 10000,
    buffer_mb: int = 32,
    children: int = 2,
    workdir: str = GUEST_WORKDIR,
    port: int = PORT,
) -> str:
    """The command that starts ``tier`` listening on ``port``; ``backend`` is where the
    tier before it listens (app: the db; web: the app). The exec probe splits it on spaces."""
    if tier == "db":
        args: list[object] = [port, server_id, rows, buffer_mb, workdir]
    elif tier == "app":
        args = [port, *backend, rows, children, workdir]
    else:
        args = [port, *backend, workdir]
    return " ".join(["/bin/sh", script(tier), *map(str, args)])


__all__ = ["GUEST_DIR", "PAGE", "PORT", "PhpMissing", "guest_binaries", "guest_files"]
