"""Selectors: key=value terms, AND within a selector, OR across selectors."""

from __future__ import annotations

import numpy as np
import pytest

from test_store_api import add, new_experiment
from vmtax.errors import UsageError, VmtaxError
from vmtax.store import Store
from vmtax.store.select import mask, parse

pytestmark = pytest.mark.fast


@pytest.fixture
def filled(store: Store) -> tuple[Store, dict]:
    """Two experiments; the second has L0 and two L1 configurations and two probes."""
    ids: dict = {}
    e1 = new_experiment(store)
    c = store.configuration(experiment_id=e1, level="L0", labels={}, fingerprint={},
                            target="local", provenance={})  # fmt: skip
    ids["e1"] = [add(store, e1, c, 0, 0, np.arange(3.0))]
    e2 = new_experiment(store)
    kvm = {"hypervisor": {"detected": True, "vendor": "KVM"}}
    l0 = store.configuration(experiment_id=e2, level="L0", labels={}, fingerprint=kvm,
                             target="local", provenance={})  # fmt: skip
    tcg = store.configuration(experiment_id=e2, level="L1", labels={"accel": "tcg", "vcpus": "2"},
                              fingerprint={"hypervisor": {"detected": True, "vendor": "QEMU"}},
                              target="qemu-L1", provenance={})  # fmt: skip
    kv = store.configuration(experiment_id=e2, level="L1", labels={"accel": "kvm", "vcpus": "2"},
                             fingerprint=kvm, target="qemu-L1", provenance={})  # fmt: skip
    ids["l0"] = [add(store, e2, l0, 0, 0, np.arange(3.0))]
    ids["tcg_cpuid"] = [add(store, e2, tcg, 1, 0, np.arange(3.0))]
    ids["tcg_timer"] = [add(store, e2, tcg, 2, 0, np.arange(3.0), probe="timer")]
    ids["kvm_failed"] = [add(store, e2, kv, 3, 0, np.empty(0), summary=None, status="failed")]
    ids["e1_id"], ids["e2_id"] = e1, e2
    return store, ids


def run_ids(store: Store, *selectors: str) -> list[int]:
    return store.runs(list(selectors))["run_id"].tolist()


def test_selectors(filled):
    store, ids = filled
    e1, e2 = ids["e1_id"], ids["e2_id"]
    everything = ids["e1"] + ids["l0"] + ids["tcg_cpuid"] + ids["tcg_timer"] + ids["kvm_failed"]
    assert run_ids(store) == everything
    assert run_ids(store, str(e1)) == ids["e1"]  # a bare integer is an experiment id
    assert run_ids(store, f"exp={e1}") == ids["e1"]
    assert run_ids(store, f"experiment={e1}") == ids["e1"]
    assert run_ids(store, "latest") == everything[1:]
    assert run_ids(store, "exp=latest,level=L0") == ids["l0"]
    assert run_ids(store, "exp=LATEST,level=l1,probe=cpuid") == ids["tcg_cpuid"] + ids["kvm_failed"]
    assert run_ids(store, "probe=timer") == ids["tcg_timer"]
    assert run_ids(store, "accel=TCG") == ids["tcg_cpuid"] + ids["tcg_timer"]
    assert run_ids(store, "accel=kvm") == ids["kvm_failed"]
    assert run_ids(store, "vcpus=2,accel=tcg,probe=cpuid") == ids["tcg_cpuid"]
    assert run_ids(store, "config=L1 accel=tcg vcpus=2") == ids["tcg_cpuid"] + ids["tcg_timer"]
    assert run_ids(store, "config=l0") == ids["e1"] + ids["l0"]
    assert run_ids(store, "hypervisor=qemu") == ids["tcg_cpuid"] + ids["tcg_timer"]
    assert run_ids(store, "hypervisor=none") == ids["e1"]
    assert run_ids(store, "target=qemu-l1,status=failed") == ids["kvm_failed"]
    assert run_ids(store, "status=ok", f"exp={e1}") == everything[:4]  # OR across selectors
    assert run_ids(store, f"run={ids['l0'][0]}") == ids["l0"]
    assert run_ids(store, f"exp={e1},exp={e2}") == []  # AND of two experiments: nothing
    assert run_ids(store, "nosuchlabel=1") == []
    with pytest.raises(VmtaxError, match="no experiment 999 in "):
        run_ids(store, "exp=999")  # an id the store lacks is "not found", not an empty match
    assert run_ids(store, f" exp = {e1} ") == ids["e1"]


def test_mask_on_a_frame(filled):
    store, ids = filled
    runs = store.runs()
    m = mask(runs, "level=L1,accel=tcg")
    assert m.dtype == bool and m.index.equals(runs.index)
    assert runs[m]["run_id"].tolist() == ids["tcg_cpuid"] + ids["tcg_timer"]
    # "latest" inside a frame means the newest experiment in that frame
    only_e1 = runs[runs["experiment_id"] == ids["e1_id"]]
    assert mask(only_e1, "exp=latest").all()
    assert not mask(runs.iloc[0:0], "latest").any()


@pytest.mark.parametrize(
    "selector",
    ["", "   ", "probe", "probe=", "=cpuid", "exp=first", "exp=1.5", "run=abc",
     "status=maybe", "probe=cpuid,", "level=L1,,probe=x", "bad key=1", "exp=-1"],
)  # fmt: skip
def test_bad_input_malformed_selector(selector, store):
    with pytest.raises(UsageError) as err:
        parse(selector)
    assert "\n" not in str(err.value) and err.value.exit_code == 2
    with pytest.raises(UsageError):
        store.runs([selector])
    with pytest.raises(UsageError):
        store.runs(["exp=latest", selector])  # one bad selector spoils the list
