"""How `-n 2` splits the suites (tests/conftest.py:xdist_unit): a module's tests that share a Ray stay on one
worker, and the slow modules whose tests share nothing go test by test so that both workers take them."""

from tests.conftest import SHARED_JOB_GROUP, xdist_unit


def test_the_searches_of_test_search_go_to_either_worker_and_modules_with_a_shared_ray_stay_whole():
    a, b = "tests/test_search.py::test_one", "tests/test_search.py::test_two"
    assert xdist_unit(a) == a and xdist_unit(b) == b
    assert xdist_unit("tests/test_ray_jobs.py::test_x") == SHARED_JOB_GROUP
    # modules with fast tests beside their slow ones stay whole
    assert xdist_unit("tests/test_cluster.py::test_x") == "tests/test_cluster.py"
    assert xdist_unit("tests/test_failures.py::test_x") == "tests/test_failures.py"
