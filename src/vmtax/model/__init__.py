"""The nested-cost model: explain the nested VM's cost from the VM's by exit multiplication,
predict deeper levels, and ask DVH's what-if (docs/model.md).

Example::

    from vmtax.model import from_dataset, fit
    result = fit(from_dataset("dvh2020_micro"), offset=0)
    print(result.predictions)
"""

from __future__ import annotations

from vmtax.model.nested import Fit, Series, fit
from vmtax.model.sources import from_dataset

__all__ = ["Fit", "Series", "fit", "from_dataset"]
