import numpy as np

from workloads.distractors import DistractorSource, choose_all


def test_choose_all_takes_the_largest_raw_dot_product_and_never_the_query_itself():
    pool_paths = ["/p/a.mp4", "/p/b.mp4", "/p/c.mp4", "/p/q.mp4"]
    pool = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [10.0, 10.0]], np.float32)
    queries = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    # raw dot products (no normalisation, as the reference): q0 -> c (3) but q.mp4 (10) is the query's own video
    chosen = choose_all(pool, queries, pool_paths, ["/p/q.mp4", "/x/other.mp4", "/x/third.mp4"])
    assert chosen == [2, 3, 3]


def test_undecodable_pool_videos_are_skipped_and_undecodable_queries_get_none():
    pool = np.array([[-np.inf, -np.inf], [1.0, 0.0], [0.5, 0.0]], np.float32)
    queries = np.array([[1.0, 0.0], [-np.inf, -np.inf]], np.float32)
    assert choose_all(pool, queries, ["a", "b", "c"], ["x", "y"]) == [1, None]


def test_faithful_only_with_the_references_three_ingredients():
    assert DistractorSource("folder", "vlm", "zero_shot_clip").faithful
    for source in (DistractorSource("train_split", "vlm", "zero_shot_clip"),
                   DistractorSource("folder", "query_video", "zero_shot_clip"),
                   DistractorSource("folder", "vlm", "finetuned")):
        assert not source.faithful
