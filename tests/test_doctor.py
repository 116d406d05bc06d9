"""`vmtax doctor` and the one package list: what is missing is named once, in one line.

A machine without QEMU, a kernel or the servers is simulated by an empty PATH and a kernel
path that does not exist (uninstalling packages from the test machine is not an option);
the checks themselves are the real ones.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from vmtax import doctor
from vmtax.errors import VmtaxError
from vmtax.workloads import package_capabilities

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]


def test_scripts_test_installs_exactly_the_packages_doctor_knows():
    # The same extraction scripts/test runs, read from the script itself.
    script = (ROOT / "scripts" / "test").read_text()
    start = script.index("mapfile -t APT_PACKAGES")
    end = script.index("\n\n", start)
    snippet = script[start:end].split("\n[")[0] + '\nprintf "%s\\n" "${APT_PACKAGES[@]}"'
    out = subprocess.run(
        ["bash", "-c", snippet], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == doctor.all_apt_packages(package_capabilities())
    assert "APT_PACKAGES=(" not in script  # no second list


def test_each_workloads_packages_come_from_its_recipe_alone():
    listed = doctor.capabilities()
    for cap in package_capabilities():
        assert cap.name not in listed, f"{cap.name} is listed in packages.txt besides its recipe"
        assert cap.apt and cap.needs, cap.name
    assert {c.name for c in package_capabilities()} == {
        "oltp", "http", "memcached", "crypto", "hackbench", "static",
    }  # fmt: skip


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    from vmtax.targets.base import find_agent

    monkeypatch.setenv("VMTAX_PROBE", str(find_agent()))  # the agent pip built, found first
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("VMTAX_KERNEL", str(tmp_path / "no-vmlinuz"))


def test_a_bare_machine_gets_one_install_line_with_every_package_once(bare_machine, cli):
    result = cli("doctor", "--format", "json")
    data = json.loads(result.stdout)
    state = {row["capability"]: row["ok"] for row in data["capabilities"]}
    assert state["agent"] is True  # VMTAX_PROBE names it: the default run can run
    assert not state["levels"] and not state["oltp"] and not state["http"]
    assert not state["kvm"]
    apt = data["install"]["apt"]
    assert apt.startswith("apt-get update && apt-get install -y ")  # lists first
    packages = apt.removeprefix("apt-get update && apt-get install -y ").split()
    assert len(packages) == len(set(packages))
    assert {"qemu-system-x86", "linux-image-amd64", "mariadb-server", "lighttpd"} <= set(packages)
    assert data["install"]["dnf"].startswith("dnf install -y ")


def test_the_text_report_ends_with_the_install_line(bare_machine, cli):
    out = cli("doctor").stdout
    assert "✘" in out and "✔" in out
    install = "apt-get update && apt-get install"
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith(install)]
    assert len(lines) == 1


def test_doctor_exits_1_when_the_agent_cannot_run(cli, tmp_path):
    # It says so in its table and ends with 1: the command's typer.Exit(1) came back from the
    # app as a return value outside standalone mode, and the CLI ended with 0 regardless.
    result = cli("doctor", agent_path=str(tmp_path / "no-agent"))
    assert result.returncode == 1, result.stdout[-500:]


def test_this_machine_has_everything_the_tests_use(cli):
    # CI installs every package of the list first, so nothing may be missing here (what an
    # earlier vmtax left is no package: test_leftovers.py).
    data = json.loads(cli("doctor", "--format", "json").stdout)
    missing = [
        r["capability"]
        for r in data["capabilities"]
        if not r["ok"] and r["capability"] not in ("kvm", "leftover")
    ]
    assert missing == [] and data["install"]["apt"] is None


def test_a_run_names_every_missing_package_of_the_levels_at_once(bare_machine):
    from vmtax.targets.levels import level_targets

    with pytest.raises(VmtaxError) as caught:
        level_targets(["L0", "L1"], accel="tcg")
    message = caught.value.message
    assert message.count("apt-get install -y") == 1 and "\n" not in message
    for pkg in ("qemu-system-x86", "qemu-utils", "linux-image-amd64", "busybox-static", "cpio"):
        assert pkg in message


def test_a_workload_run_names_its_missing_servers_before_anything_starts(
    bare_machine, cli, tmp_path
):
    db = tmp_path / "w.db"
    result = cli("run", "--probe", "http", "--probe", "oltp", "--runs", "2", "--db", str(db))
    assert result.returncode == 1
    assert "apt-get install -y" in result.stderr and "lighttpd" in result.stderr
    assert "mariadb-server" in result.stderr
    assert result.stderr.count("\n") == 1
    assert not db.exists()  # refused before the store was opened: no empty store is left


def test_a_levels_run_names_the_missing_packages_before_it_opens_the_store(
    bare_machine, cli, tmp_path
):
    db = tmp_path / "levels.db"
    result = cli("run", "--levels", "L0,L1", "--runs", "2", "--db", str(db))
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.count("apt-get install -y") == 1
    assert "qemu-system-x86" in result.stderr and "linux-image-amd64" in result.stderr
    assert not db.exists()


def _only(rows_ok: dict[str, bool], monkeypatch) -> None:
    """The doctor's rows replaced by these (a machine with everything, or with one thing
    missing, is not this one): the rendering and the pip line are the real ones."""
    from vmtax.experiment import doctor as use_case

    def check(*, clean: bool = False):
        rows = [{"capability": name, "ok": ok, "detail": "ok" if ok else "not here", "apt": []}
                for name, ok in rows_ok.items()]  # fmt: skip
        for row in rows:
            if row["capability"] == "postgres-store" and not row["ok"]:
                row["pip"] = ["'psycopg[binary]'"]
        wanted = [p for r in rows if not r["ok"] for p in r.get("pip", [])]
        pip = f"pip install {' '.join(wanted)}" if wanted else None
        return use_case.Checked(rows, None, None, pip, [])

    monkeypatch.setattr(use_case, "check", check)  # the command imports it when it runs


def test_nothing_is_missing_only_when_every_row_is_ok(cli, monkeypatch):
    _only({"agent": True, "levels": True, "postgres-store": True, "fleet": True}, monkeypatch)
    assert cli("doctor").stdout.rstrip().endswith("nothing is missing")
    # The round's case: every apt package there, the PostgreSQL driver ✘.
    _only({"agent": True, "levels": True, "postgres-store": False, "fleet": True}, monkeypatch)
    out = cli("doctor").stdout
    assert "nothing is missing" not in out
    assert "pip install 'psycopg[binary]'" in out
    # A ✘ no package fixes (no /dev/kvm) is named, never "nothing is missing".
    _only({"agent": True, "kvm": False}, monkeypatch)
    out = cli("doctor").stdout
    assert "nothing is missing" not in out and "not usable here: kvm" in out


def test_the_pip_line_names_the_driver_when_only_the_driver_is_missing(monkeypatch):
    """The real rows: the pip line was taken from the last row (Ansible's), so a missing
    psycopg beside a present Ansible gave no pip line at all."""
    import importlib.util

    from vmtax.experiment import doctor as use_case

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "psycopg" else real(name, *a)
    )
    checked = use_case.check()
    row = next(r for r in checked.rows if r["capability"] == "postgres-store")
    assert row["ok"] is False and "postgres-store" in checked.missing
    assert checked.pip is not None and "psycopg[binary]" in checked.pip
