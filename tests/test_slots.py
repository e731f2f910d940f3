"""Trial slots and render actors on a cluster's logical resources (orchestrator/planning/resources.py): the two share
one count of the trials that run at once; only `trial_slots` floors it at one. `current_cluster()` reads a real Ray
cluster's resources."""

import pytest
import ray

from orchestrator.config.schema import RuntimeSpec
from orchestrator.planning.resources import Cluster, render_actors, trial_slots
from orchestrator.stages.cluster import current_cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(request):
    assert not ray.is_initialized()
    ray.init(num_cpus=request.param[0], num_gpus=request.param[1], include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.mark.parametrize("cluster", [(8, 2)], indirect=True)
def test_gpu_cluster_slots_and_render_actors(cluster):
    cases = [  # runtime -> (trial slots, render actors)
        ({"gpus_per_trial": 0.5}, (4, 4)),                              # 4 GPU slots keep 4 CPUs
        ({"gpus_per_trial": 0.5, "max_concurrent_trials": 3}, (3, 5)),
        ({"gpus_per_trial": 0.3}, (6, 2)),                              # 6.67 slots: 6
        ({"gpus_per_trial": 1, "cpus_per_trial": 3}, (2, 2)),
        ({"cpus_per_trial": 2}, (4, 6)),                                # CPU trials: renders keep one trial's CPUs
        ({"gpus_per_trial": 0.5, "render_actors": 3}, (4, 3)),          # the grid's own count wins
    ]
    cluster = current_cluster()
    assert cluster == Cluster(cpus=8, gpus=2, largest_node_cpus=8)
    for runtime, expected in cases:
        rt = RuntimeSpec(**runtime)
        assert (trial_slots(rt, cluster), render_actors(rt, cluster)) == expected, runtime


@pytest.mark.parametrize("cluster", [(4, 0)], indirect=True)
def test_gpu_trials_on_a_cluster_without_gpus(cluster):
    rt, cluster = RuntimeSpec(gpus_per_trial=0.5), current_cluster()
    # no GPU slot: every CPU renders; Tune's count stays one (submit never gets this far: ray_env.check_resources
    # stops a GPU grid on a cluster without GPUs before the pipeline starts)
    assert trial_slots(rt, cluster) == 1 and render_actors(rt, cluster) == 4


def test_first_finetunes_take_the_node_only_when_nothing_else_could_use_it():
    from orchestrator.planning.resources import first_finetune_cpus

    one_node = Cluster(cpus=2, gpus=0, largest_node_cpus=2)
    cpu = RuntimeSpec(cpus_per_trial=1)
    assert first_finetune_cpus(cpu, one_node, 1, gates_every_trial=True) == 2   # the quickstart's clip4clip
    assert first_finetune_cpus(cpu, Cluster(8, 0, 8), 3, True) == 2             # 8 CPUs over 3: 2 each
    assert first_finetune_cpus(cpu, one_node, 2, True) == 0                     # one CPU each: the usual share
    assert first_finetune_cpus(cpu, one_node, 1, gates_every_trial=False) == 0  # a trial could run beside it
    assert first_finetune_cpus(cpu, Cluster(16, 0, 8), 1, True) == 0             # other nodes render meanwhile
    assert first_finetune_cpus(RuntimeSpec(gpus_per_trial=0.5), Cluster(2, 1, 2), 1, True) == 0   # GPU fine-tune
