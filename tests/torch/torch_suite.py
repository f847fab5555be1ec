"""torch's own distributed test suite (torch.testing._internal.distributed.distributed_test) on weft, run the way
torch_ucc ran it for ucc: BACKEND names the backend, each test forks WORLD_SIZE ranks that meet through a file store
under TEMP_DIR, and DistributedTest._DistTestBase's tests run in them.

    PYTHONPATH=python WEFT_SOCKET_IFNAME=lo .venv/bin/python tests/torch/torch_suite.py            # all, 2 ranks
    WORLD_SIZE=3 ... tests/torch/torch_suite.py -k test_broadcast -k test_reduce_sum                  # a few, 3 ranks
    ... tests/torch/torch_suite.py --as-gloo                                 # the tests gated on gloo, on weft
    WORLD_SIZE=3 ... tests/torch/torch_suite.py --as-mpi -k all_to_all          # the tests gated on mpi, on weft
    ... tests/torch/torch_suite.py --subset [--as-gloo | --as-mpi]                        # meson's subsets
    WORLD_SIZE=8 ... tests/torch/torch_suite.py --groups                   # the subgroup variants, 8 ranks

The suite knows gloo, nccl, ucc and mpi by name. For a backend it does not know, a test either runs as written,
skips (requires_gloo, skip_if_no_gpu, "Only gloo backend supports timeouts", ...) or checks what the backend
claims in DistTestCases; weft claims what it does on CPU tensors before the suite is imported (its decorators read
those sets at import): DDP and subgroups work (all_gather_coalesced and recv from any source work too, so they are
not claimed refused).
docs/torch.md has the table of what runs, passes, fails and skips, and why.
"""

import os
import sys
import tempfile

# --as-gloo: the suite believes it runs gloo (its decorators gate about 50 CPU tests on that name), and every
# group it asks gloo for is made with weft instead. What fails there for gloo-only expectations (a backend name,
# gloo's timeouts, sparse tensors) is in docs/torch.md's table.
# --as-mpi: the same for mpi, which the suite alone trusts with all-to-all on CPU tensors (12 tests; for mpi it
# runs the 3 on a group of part of the world, ranks 1 and 2, at any world size, so they need 3 ranks). meson runs
# only those that way: read as mpi, the suite runs no other test that BACKEND=weft or --as-gloo does not.
AS = None
for _name in ("gloo", "mpi"):
    if "--as-" + _name in sys.argv:
        if AS is not None:
            sys.exit("--as-gloo and --as-mpi: pick one")
        sys.argv.remove("--as-" + _name)
        AS = _name
        os.environ["BACKEND"] = _name
# torch's runner treats any non-empty CI as its own CI: it then writes XML reports through a package torch does not
# depend on (unittest-xml-reporting) and picks CI-only profiles. This suite reports through meson, so it runs the
# same inside and outside a CI job.
os.environ.pop("CI", None)
os.environ.setdefault("BACKEND", "weft")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("WEFT_SOCKET_IFNAME", "lo")
os.environ.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "120")  # a hung test fails after this, not 300 s
if "TEMP_DIR" not in os.environ:
    _tmp = tempfile.TemporaryDirectory(prefix="weft-torch-suite-")
    os.environ["TEMP_DIR"] = _tmp.name
for _d in ("barrier", "test_dir"):
    os.makedirs(os.path.join(os.environ["TEMP_DIR"], _d), exist_ok=True)
os.environ.setdefault("INIT_METHOD", "file://%s/shared_init_file" % os.environ["TEMP_DIR"])

try:
    import expecttest  # noqa: E402,F401  torch's test utilities import it; it is not one of torch's dependencies
except ImportError:
    print("skip: torch's distributed test suite needs the expecttest package (pip install expecttest)", flush=True)
    sys.exit(77)
import torch  # noqa: E402
import weft.torch  # noqa: E402,F401  registers "weft"; forked ranks inherit it
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if os.environ["BACKEND"] == "weft":
    DistTestCases.backend_feature["ddp"].add("weft")
    DistTestCases.backend_feature["subgroup"].add("weft")
    DistTestCases.backend_feature["plugin"].add("weft")

if AS is not None:
    import torch.distributed as dist

    def _weft_for(fn):
        def wrapper(*args, **kwargs):
            if kwargs.get("backend") in (AS, dist.Backend(AS)):
                kwargs["backend"] = "weft"
            return fn(*args, **kwargs)
        return wrapper
    dist.init_process_group = _weft_for(dist.init_process_group)
    dist.new_group = _weft_for(dist.new_group)

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestWeftBackend(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        # fork, not spawn: the ranks inherit the imported torch and the registration, which saves seconds a test
        # on a 2-core machine; the CPU-only tests never touch CUDA before the fork.
        self._start_processes(torch.multiprocessing.get_context("fork").Process)


# meson's tests (torch_suite_np2, torch_suite_as_gloo_np2): tests that pass on weft, a few of each group, bounded
# to well under two minutes on 2 cores (each test forks its ranks and makes its process group anew).
SUBSET = [
    "test_broadcast", "test_broadcast_full_group",
    "test_reduce_sum", "test_reduce_max", "test_reduce_product", "test_reduce_full_group_min",
    "test_all_reduce_sum", "test_all_reduce_min", "test_all_reduce_sum_async", "test_all_reduce_sum_complex",
    "test_all_reduce_full_group_product", "test_all_reduce_complex_unsupported_ops",
    "test_all_gather", "test_all_gather_complex", "test_all_gather_coalesced_simple",
    "test_all_gather_coalesced_with_empty", "test_gather", "test_gather_checks",
    "test_scatter", "test_scatter_checks", "test_scatter_complex",
    "test_send_recv", "test_isend", "test_irecv", "test_send_recv_with_tag", "test_send_recv_any_source",
    "test_barrier", "test_barrier_full_group", "test_destroy_group", "test_get_rank_size_group",
    "test_DistributedDataParallelCPU", "test_DistributedDataParallelCPU_grad_is_view",
    "test_DistributedDataParallel_requires_grad", "test_ddp_create_graph", "test_static_graph_api_cpu",
    "test_SyncBatchNorm_process_group",
]
SUBSET_AS_GLOO = [
    "test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags",
    "test_all_reduce_coalesced_sum", "test_all_reduce_coalesced_full_group_max",
    "test_all_gather_object_default_pg", "test_all_gather_object_subgroup", "test_scatter_object_list",
    "test_get_future", "test_grads_same_across_ranks_with_no_sync",
    "test_barrier_timeout_global", "test_barrier_timeout_full_group", "test_sparse_all_reduce_sum",
]
SUBSET_AS_MPI = [
    "test_all_to_all", "test_all_to_all_complex", "test_all_to_all_group", "test_all_to_all_full_group",
    "test_all_to_all_single_equal_split", "test_all_to_all_single_equal_split_complex",
    "test_all_to_all_single_equal_split_group", "test_all_to_all_single_equal_split_full_group",
    "test_all_to_all_single_unequal_split", "test_all_to_all_single_unequal_split_complex",
    "test_all_to_all_single_unequal_split_group", "test_all_to_all_single_unequal_split_full_group",
]
# The collectives on a group of part of the world (new_group of ranks 1..N-2 and the like): torch runs them at
# 8 ranks or more only (skip_if_small_worldsize), so meson runs them at 8 (torch_suite_groups_np8).
SUBSET_GROUPS = [
    "test_broadcast_group", "test_reduce_group_sum", "test_reduce_group_product", "test_reduce_group_min",
    "test_reduce_group_max", "test_all_reduce_group_sum", "test_all_reduce_group_product",
    "test_all_reduce_group_min", "test_all_reduce_group_max", "test_all_gather_group",
    "test_all_gather_coalesced_group", "test_gather_group", "test_scatter_group", "test_barrier_group",
]


if __name__ == "__main__":
    if "--groups" in sys.argv and AS == "mpi":
        sys.exit("--groups --as-mpi: the suite runs mpi's group variants at any world size; --subset has them")
    if "--groups" in sys.argv and int(os.environ["WORLD_SIZE"]) < 8:
        sys.exit("--groups: WORLD_SIZE=%s, and torch skips these tests below 8 ranks (set WORLD_SIZE=8)"
                 % os.environ["WORLD_SIZE"])
    if "--subset" in sys.argv and AS == "mpi" and int(os.environ["WORLD_SIZE"]) < 3:
        sys.exit("--subset --as-mpi: WORLD_SIZE=%s, and the suite's all-to-all on a group takes ranks 1 and 2 "
                 "(set WORLD_SIZE=3)" % os.environ["WORLD_SIZE"])
    subsets = {None: (SUBSET, SUBSET_GROUPS), "gloo": (SUBSET_AS_GLOO, SUBSET_GROUPS), "mpi": (SUBSET_AS_MPI, [])}
    for flag, names in zip(("--subset", "--groups"), subsets[AS]):
        if flag in sys.argv:
            sys.argv.remove(flag)
            sys.argv += ["TestWeftBackend." + name for name in names]
    run_tests()
