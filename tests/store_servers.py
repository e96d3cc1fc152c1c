"""Real storage servers for the store tests: moto's S3 server and gcp-storage-emulator, on 127.0.0.1.

Import the fixtures into a test module (``from tests.store_servers import ...``).  Each server starts
once per session on a free port; every test gets its own bucket, so tests never see each other's
objects.  Dummy credentials keep botocore and google-auth from probing cloud metadata endpoints.
"""

from __future__ import annotations

import logging
import os
import uuid

import pytest

# gcsfs 2026.x otherwise calls a gRPC control API on every bucket access, which the plain-HTTP
# emulator cannot answer (60 s timeouts); it must be set before gcsfs is imported.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

S3_KEY, S3_SECRET = "testing-key-id", "testing-secret-value"


@pytest.fixture(scope="session")
def moto_endpoint() -> str:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def gcs_endpoint() -> str:
    from gcp_storage_emulator.server import create_server

    server = create_server("127.0.0.1", 0, in_memory=True)
    server.start()
    port = server._api._httpd.server_address[1]  # the emulator has no public accessor for the bound port
    yield f"http://127.0.0.1:{port}"
    server.stop()


def s3_options(endpoint: str) -> dict:
    return {"key": S3_KEY, "secret": S3_SECRET, "client_kwargs": {"endpoint_url": endpoint}}


def gcs_options(endpoint: str) -> dict:
    return {"endpoint_url": endpoint, "token": "anon", "project": "vertebrae-test"}


@pytest.fixture
def s3_bucket(moto_endpoint) -> str:
    import s3fs

    bucket = f"vertebrae-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(skip_instance_cache=True, **s3_options(moto_endpoint)).mkdir(bucket)
    return bucket


@pytest.fixture
def gcs_bucket(gcs_endpoint) -> str:
    import gcsfs

    bucket = f"vertebrae-{uuid.uuid4().hex[:12]}"
    gcsfs.GCSFileSystem(skip_instance_cache=True, **gcs_options(gcs_endpoint)).mkdir(bucket)
    return bucket


@pytest.fixture(params=["file", "s3", "gs"])
def store_location(request, tmp_path) -> tuple[str, dict]:
    """``(url, storage_options)`` of an empty store on each real backend."""
    if request.param == "file":
        return str(tmp_path / "cache"), {}
    if request.param == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        return f"s3://{bucket}/cache", s3_options(request.getfixturevalue("moto_endpoint"))
    bucket = request.getfixturevalue("gcs_bucket")
    return f"gs://{bucket}/cache", gcs_options(request.getfixturevalue("gcs_endpoint"))
