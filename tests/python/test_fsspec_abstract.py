"""fsspec's own abstract test suite (fsspec.tests.abstract: copy, get, put, pipe, open) run
against S3FlashFileSystem on the real RGW, wired as s3fs wires it (s3fs/tests/derived): one
bucket for the session, every test's scenario created under it and removed after."""

import uuid

import pytest

fsspec = pytest.importorskip("fsspec")
abstract = pytest.importorskip("fsspec.tests.abstract")

from s3flash.fsspec import S3FlashFileSystem  # noqa: E402


@pytest.fixture(scope="session")
def abstract_bucket(s3):
    name = f"s3fpy-abstract-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    yield name
    from conftest import _empty_bucket
    try:
        _empty_bucket(s3, name)
        s3.delete_bucket(Bucket=name)
    except Exception as e:  # the server is thrown away anyway
        print(f"cleanup of bucket {name} failed: {e}")


class S3FlashFixtures(abstract.AbstractFixtures):
    @pytest.fixture
    def fs(self, endpoint):
        return S3FlashFileSystem(endpoint_url=endpoint)

    @pytest.fixture
    def fs_path(self, abstract_bucket):
        return abstract_bucket

    @pytest.fixture
    def supports_empty_directories(self):
        # S3 has prefixes, not directories: an empty "directory" does not exist (as s3fs)
        return False


class TestS3FlashCopy(abstract.AbstractCopyTests, S3FlashFixtures):
    pass


class TestS3FlashGet(abstract.AbstractGetTests, S3FlashFixtures):
    pass


class TestS3FlashPut(abstract.AbstractPutTests, S3FlashFixtures):
    pass


class TestS3FlashPipe(abstract.AbstractPipeTests, S3FlashFixtures):
    pass


class TestS3FlashOpen(abstract.AbstractOpenTests, S3FlashFixtures):
    pass
