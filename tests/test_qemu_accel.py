"""The accelerator is chosen by booting a real test guest, never by /dev/kvm existing."""

from __future__ import annotations

import os

import pytest

from vmtax.errors import VmtaxError
from vmtax.targets import accel


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
    cached = fresh_cache / f"accel-{accel.boot_id()}.json"
    assert cached.is_file() or not os.access("/dev/kvm", os.R_OK | os.W_OK)
    chosen = accel.choose_accel("auto")
    assert chosen == ("kvm" if verdict.kvm_ok else "tcg")
    err = capsys.readouterr().err
    if not verdict.kvm_ok:
        # Said once, on one line, with the reason.
        assert err.count("\n") == 1 and "using accel=tcg" in err and "KVM refused" in err
        with pytest.raises(VmtaxError, match="accel=kvm refused"):
            accel.choose_accel("kvm")
    assert accel.choose_accel("tcg") == "tcg"


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
