"""The accelerator is chosen by booting a real test guest, never by /dev/kvm existing."""

from __future__ import annotations

import os

import pytest

from vmtax.errors import VmtaxError
from vmtax.targets import accel

pytestmark = pytest.mark.slow


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VMTAX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_tcg_test_guest_boots_to_its_marker(fresh_cache):
    verdict = accel.test_guest_boots("tcg", timeout=90)
    assert verdict.kvm_ok, verdict.reason  # kvm_ok means "the guest booted" here
    assert verdict.seconds is not None and verdict.seconds > 0


def test_kvm_is_chosen_only_after_a_test_guest_boots_and_the_verdict_is_cached(fresh_cache, capsys):
    verdict = accel.kvm_verdict(refresh=True)
    assert _cached(fresh_cache) or not os.access("/dev/kvm", os.R_OK | os.W_OK)
    chosen = accel.choose_accel("auto")
    assert chosen == ("kvm" if verdict.kvm_ok else "tcg")
    err = capsys.readouterr().err
    if not verdict.kvm_ok:
        # Said once, on one line, with the reason.
        assert err.count("\n") == 1 and "using accel=tcg" in err and "KVM refused" in err
        with pytest.raises(VmtaxError, match="accel=kvm refused"):
            accel.choose_accel("kvm")
    assert accel.choose_accel("tcg") == "tcg"


def _cached(fresh_cache):
    return sorted(fresh_cache.glob("accel-*.json"))


def test_a_verdict_without_qemu_is_never_reused_once_qemu_is_there(fresh_cache, monkeypatch):
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        pytest.skip("no /dev/kvm: without one no verdict is asked for at all")
    real_path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(fresh_cache.parent / "empty-bin"))  # no QEMU on it
    missing = accel.kvm_verdict()
    assert not missing.kvm_ok and "install qemu-system-x86" in missing.reason
    assert _cached(fresh_cache) == []  # "not installed" is never cached
    monkeypatch.setenv("PATH", real_path)
    tried = accel.kvm_verdict()
    assert "install qemu-system-x86" not in tried.reason  # a real boot attempt, not the old word
    assert len(_cached(fresh_cache)) == 1


def test_the_verdict_key_changes_with_qemu_the_kernel_and_nothing_else(tmp_path):
    if not os.path.exists("/dev/kvm"):
        pytest.skip("the key includes /dev/kvm's device numbers")
    qemu, kernel = tmp_path / "qemu", tmp_path / "vmlinuz"
    qemu.write_bytes(b"v1")
    kernel.write_bytes(b"k1")
    first = accel.verdict_key(qemu, kernel)
    assert accel.verdict_key(qemu, kernel) == first
    qemu.write_bytes(b"v2, upgraded")
    upgraded = accel.verdict_key(qemu, kernel)
    assert upgraded != first
    kernel.write_bytes(b"k2, a new image")
    assert accel.verdict_key(qemu, kernel) not in (first, upgraded)


def test_a_kvm_guest_that_hangs_after_real_mode_is_refused_at_the_timeout(fresh_cache):
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        pytest.skip("no /dev/kvm: the hang check needs one")
    if accel.kvm_verdict().kvm_ok:
        pytest.skip("KVM boots guests on this host, so there is no hang to detect")
    # qemu64 is accepted by this KVM, so QEMU starts and the guest itself must fail to boot.
    verdict = accel.test_guest_boots("kvm", timeout=6, cpu="qemu64")
    assert not verdict.kvm_ok
    assert "did not boot" in verdict.reason or "exited" in verdict.reason


def test_an_unknown_accelerator_is_a_usage_error():
    with pytest.raises(VmtaxError, match="unknown accelerator"):
        accel.choose_accel("hvf")


def test_a_guest_qemu_refuses_is_refused_with_qemus_own_first_line(fresh_cache):
    # A CPU model QEMU does not know makes it exit while starting, as KVM's refusal to set an
    # MSR does on hosts like this one: the reason is QEMU's line, not the broken QMP session.
    verdict = accel.test_guest_boots("tcg", timeout=30, cpu="no-such-cpu-model")
    assert not verdict.kvm_ok
    prefix = "QEMU could not start a guest under accel=tcg: "
    assert verdict.reason.startswith(prefix + "qemu-system-x86_64: "), verdict.reason
    assert "no-such-cpu-model" in verdict.reason
    assert "EOFError" not in verdict.reason and "session" not in verdict.reason
