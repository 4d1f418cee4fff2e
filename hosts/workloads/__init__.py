"""Seeded workloads for the agents, and the direct numpy computation they are checked against.

One module per workload (zipf.py, logistic.py, trace.py), each a class registered by name
(base.py, as topologies/targets.py registers switch targets); drift.py moves a generated
workload's popular head; cli.py is the workers' options. The package imports every module
in this folder, so a new workload is one file here (and its test): its @register makes
--workload, WORKLOAD=, the experiment's checks, the model and the configuration line take it.
"""

from __future__ import annotations

import importlib
import pkgutil

from hosts.workloads.base import (
    WORKLOADS,
    Reference,
    RunOption,
    Step,
    StreamOffset,
    Workload,
    WorkloadName,
    drifting_names,
    one_of,
    reference_run,
    register,
    workload_class,
    workload_classes,
    workload_help,
    workload_names,
)
from hosts.workloads.cli import add_arguments, from_args, parse_args
from hosts.workloads.drift import DEFAULT_DRIFT_HEAD, Drift, DriftSpec
from hosts.workloads.logistic import LogisticWorkload
from hosts.workloads.seeded import WorkloadError
from hosts.workloads.trace import TraceWorkload
from hosts.workloads.zipf import ZipfWorkload

# A module added to this folder registers its workload when the package is imported.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "DEFAULT_DRIFT_HEAD",
    "WORKLOADS",
    "Drift",
    "DriftSpec",
    "LogisticWorkload",
    "Reference",
    "RunOption",
    "Step",
    "StreamOffset",
    "TraceWorkload",
    "Workload",
    "WorkloadError",
    "WorkloadName",
    "ZipfWorkload",
    "add_arguments",
    "drifting_names",
    "from_args",
    "one_of",
    "parse_args",
    "reference_run",
    "register",
    "workload_class",
    "workload_classes",
    "workload_help",
    "workload_names",
]
