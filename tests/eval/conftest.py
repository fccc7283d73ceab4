import pytest

from tests.eval.needles import write_needle_dataset


@pytest.fixture(scope="session")
def needle_dataset(tmp_path_factory, tokenizer) -> str:
    return write_needle_dataset(tmp_path_factory.mktemp("tasks"), tokenizer)
