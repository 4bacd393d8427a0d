"""`testbed image build|run`: the Docker image for machines without a hypervisor.

Built from the repository's Dockerfile (which runs setup.sh, as the Vagrant lab does) with
the Docker SDK, so build progress streams into the terminal and a run's exit status comes back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TAG = "roce-testbed:latest"
RUN_HINT = "docker run --rm -it --privileged {tag} testbed up --pingall"


class ImageError(Exception):
    """Docker is unreachable or the build/run failed; the message says which and why."""


def _client():
    try:
        import docker
        from docker.errors import DockerException
    except ImportError as exc:  # pragma: no cover - docker is a dependency
        raise ImageError("the docker Python package is missing: pip install docker") from exc
    try:
        client = docker.from_env()
        client.ping()
        return client
    except DockerException as exc:
        raise ImageError(
            "no Docker engine answers (is the docker service running, and may this user use "
            f"its socket?): {exc}") from None


def build(tag: str = DEFAULT_TAG, log: Callable[[str], None] = print) -> str:
    client = _client()
    from docker.errors import APIError, BuildError

    try:
        for chunk in client.api.build(path=str(REPO), tag=tag, rm=True, decode=True):
            if "stream" in chunk and chunk["stream"].strip():
                log(chunk["stream"].rstrip())
            if "error" in chunk:
                raise ImageError(f"build failed: {chunk['error'].strip()}")
    except (APIError, BuildError) as exc:
        raise ImageError(f"build failed: {exc}") from None
    return tag


def run(command: list[str], tag: str = DEFAULT_TAG, log: Callable[[str], None] = print) -> int:
    """Run a command in a privileged container (Mininet needs it); stream its output."""
    client = _client()
    from docker.errors import APIError, ImageNotFound

    try:
        c = client.containers.run(tag, command or None, privileged=True, detach=True)
    except ImageNotFound:
        raise ImageError(f"no image {tag}: run `testbed image build` first") from None
    except APIError as exc:
        raise ImageError(f"could not start {tag}: {exc}") from None
    try:
        for line in c.logs(stream=True, follow=True):
            log(line.decode(errors="replace").rstrip())
        return int(c.wait().get("StatusCode", 1))
    finally:
        c.remove(force=True)
