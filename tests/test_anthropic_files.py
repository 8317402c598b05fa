"""Anthropic's Files API through the gateway (``edge.anthropic_files``), with the official
``anthropic`` SDK against the simulator over loopback: each file its tenant's, streamed
both ways."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import psutil
import pytest
import trio
from support import (
    SIM_KEY,
    Sim,
    anthropic_client,
    openai_client,
    proxy_settings,
    running_proxy,
    running_simulator,
)
from test_tenants_live import KEYS, _tenants_file

BETAS = ["files-api-2025-04-14"]
MODEL = "claude-sonnet-4-5-20250929"
MB = 1024 * 1024


def _message_about(file_id: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "document", "source": {"type": "file", "file_id": file_id}},
            {"type": "text", "text": "Summarise the document."},
        ],
    }


async def _upstream_files(sim: Sim) -> list[dict[str, Any]]:
    """The files the simulator holds, asked of it directly with the gateway's key."""
    headers = {
        "x-api-key": SIM_KEY,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": BETAS[0],
    }
    async with httpx2.AsyncClient() as http:
        answer = await http.get(f"{sim.url}/v1/files?limit=1000", headers=headers)
        answer.raise_for_status()
        data: list[dict[str, Any]] = answer.json()["data"]
        return data


async def test_the_sdk_uploads_lists_reads_downloads_uses_and_deletes_a_file(
    tmp_path: Path,
) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path / "d"), metrics_enabled=True)
        async with running_proxy(settings) as url:
            client = anthropic_client(url)
            files = client.beta.files
            made = await files.upload(
                file=("notes.txt", b"hello, files", "text/plain"), betas=BETAS
            )
            assert made.id.startswith("file_") and made.type == "file"
            assert (made.filename, made.mime_type, made.size_bytes) == (
                "notes.txt",
                "text/plain",
                12,
            )
            listed = await files.list(betas=BETAS)
            assert [f.id for f in listed.data] == [made.id]
            assert (await files.retrieve_metadata(made.id, betas=BETAS)) == made
            downloaded = await files.download(made.id, betas=BETAS)
            assert await downloaded.read() == b"hello, files"
            reply = await client.beta.messages.create(
                model=MODEL, max_tokens=16, betas=BETAS, messages=[_message_about(made.id)]
            )
            assert reply.content[0].type == "text"
            deleted = await files.delete(made.id, betas=BETAS)
            assert deleted.id == made.id and deleted.type == "file_deleted"
            with pytest.raises(anthropic.NotFoundError) as gone:
                await files.retrieve_metadata(made.id, betas=BETAS)
            assert gone.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
            assert (await files.list(betas=BETAS)).data == []
            assert await _upstream_files(sim) == []
            async with httpx2.AsyncClient() as http:
                metrics = (await http.get(f"{url}/metrics")).json()
            # upload, list, metadata, download, delete, list; the refused metadata
            assert metrics["by_surface"]["anthropic.files"]["requests"]["by_status"] == {
                "200": 6,
                "404": 1,
            }
            # Without anthropic-version or the beta, /v1/files stays OpenAI's own store.
            openai = openai_client(url)
            batch_input = await openai.files.create(file=("b.jsonl", b"{}\n"), purpose="batch")
            assert batch_input.object == "file"
            assert [f.id for f in (await openai.files.list()).data] == [batch_input.id]
            assert await _upstream_files(sim) == []


async def test_a_tenant_never_sees_nor_uses_another_tenants_file(tmp_path: Path) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(
            sim, tenants_file=str(_tenants_file(tmp_path)), data_dir=str(tmp_path / "d")
        )
        async with running_proxy(settings) as url:
            owner = anthropic_client(url, api_key=KEYS["team-a"])
            other = anthropic_client(url, api_key=KEYS["team-b"])
            made = await owner.beta.files.upload(file=("a.txt", b"team a's"), betas=BETAS)
            theirs = await other.beta.files.upload(file=("b.txt", b"team b's"), betas=BETAS)
            before = len(await sim.received())
            attempts = [
                other.beta.files.retrieve_metadata(made.id, betas=BETAS),
                other.beta.files.download(made.id, betas=BETAS),
                other.beta.files.delete(made.id, betas=BETAS),
                other.beta.messages.create(
                    model=MODEL, max_tokens=16, betas=BETAS, messages=[_message_about(made.id)]
                ),
            ]
            for attempt in attempts:
                with pytest.raises(anthropic.NotFoundError) as refused:
                    await attempt
                error = refused.value.body["error"]  # type: ignore[index]
                assert error == {"type": "not_found_error", "message": f"File not found: {made.id}"}
            assert [f.id for f in (await other.beta.files.list(betas=BETAS)).data] == [theirs.id]
            assert [f.id for f in (await owner.beta.files.list(betas=BETAS)).data] == [made.id]
            assert len(await sim.received()) == before  # none of it reached the upstream
            # The owner still has it, whole.
            downloaded = await owner.beta.files.download(made.id, betas=BETAS)
            assert await downloaded.read() == b"team a's"


async def test_ownership_survives_a_gateway_restart(tmp_path: Path) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(
            sim, tenants_file=str(_tenants_file(tmp_path)), data_dir=str(tmp_path / "d")
        )
        async with running_proxy(settings) as url:
            first = anthropic_client(url, api_key=KEYS["team-a"])
            made = [
                await first.beta.files.upload(file=(f"{i}.txt", b"x" * i), betas=BETAS)
                for i in range(1, 4)
            ]
        async with running_proxy(settings) as url:
            owner = anthropic_client(url, api_key=KEYS["team-a"])
            other = anthropic_client(url, api_key=KEYS["team-b"])
            page = await owner.beta.files.list(limit=2, betas=BETAS)
            assert [f.id for f in page.data] == [made[2].id, made[1].id]  # newest first
            assert page.has_next_page()
            rest = await page.get_next_page()
            assert [f.id for f in rest.data] == [made[0].id]
            assert (await owner.beta.files.retrieve_metadata(made[0].id, betas=BETAS)) == made[0]
            assert (await other.beta.files.list(betas=BETAS)).data == []
            with pytest.raises(anthropic.NotFoundError):
                await other.beta.files.retrieve_metadata(made[0].id, betas=BETAS)


def _multipart(size: int, boundary: str) -> tuple[int, AsyncIterator[bytes]]:
    """A multipart upload of ``size`` bytes, generated as it is sent (the test's own
    memory stays flat too), and its length."""
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        'filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n'
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    block = os.urandom(256 * 1024)

    async def body() -> AsyncIterator[bytes]:
        yield head
        left = size
        while left:
            chunk = block[: min(left, len(block))]
            left -= len(chunk)
            yield chunk
        yield tail

    return len(head) + size + len(tail), body()


def _upload_headers(boundary: str, length: int) -> dict[str, str]:
    return {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": BETAS[0],
        "x-api-key": "unused",
        "content-type": f"multipart/form-data; boundary={boundary}",
        "content-length": str(length),
    }


def _spooling() -> list[Path]:
    """The simulator's uploads in progress (``simulator.files_api``: its temp dirs)."""
    return list(Path(tempfile.gettempdir()).glob("sim-files-*/partial-*"))


class _Peak:
    """The process's peak RSS above where it was when measuring began."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self.base = self.peak = self._process.memory_info().rss

    async def watch(self) -> None:
        while True:
            self.peak = max(self.peak, self._process.memory_info().rss)
            await trio.sleep(0.01)

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.base) / MB


async def test_a_100_mb_upload_and_download_stream_through_with_flat_memory(
    tmp_path: Path,
) -> None:
    size = 100 * MB
    async with running_simulator() as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path / "d"))
        async with running_proxy(settings) as url, httpx2.AsyncClient(timeout=60) as http:
            # Warm up both servers' code paths, so the measure is the transfer's.
            await anthropic_client(url).beta.files.upload(file=("w", b"w"), betas=BETAS)
            length, body = _multipart(size, "b0undary")
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    upload = _Peak()
                    nursery.start_soon(upload.watch)
                    answer = await http.post(
                        f"{url}/v1/files", content=body, headers=_upload_headers("b0undary", length)
                    )
                    nursery.cancel_scope.cancel()
                assert answer.status_code == 200, answer.text
                made = answer.json()
                assert made["size_bytes"] == size
                async with trio.open_nursery() as nursery:
                    download = _Peak()
                    nursery.start_soon(download.watch)
                    received = 0
                    async with http.stream(
                        "GET",
                        f"{url}/v1/files/{made['id']}/content",
                        headers={"anthropic-version": "2023-06-01", "anthropic-beta": BETAS[0]},
                    ) as streamed:
                        assert streamed.status_code == 200
                        async for chunk in streamed.aiter_raw():
                            received += len(chunk)
                    nursery.cancel_scope.cancel()
            assert received == size
            print(
                f"RSS growth: upload {upload.growth_mb:.1f} MB, "
                f"download {download.growth_mb:.1f} MB for {size // MB} MB"
            )
            # The gateway and the simulator share this process: both stream.
            assert upload.growth_mb < 20
            assert download.growth_mb < 20


async def test_a_client_that_leaves_mid_upload_leaves_no_file_upstream(tmp_path: Path) -> None:
    async with running_simulator() as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path / "d"))
        async with running_proxy(settings) as url:
            host, port = url.removeprefix("http://").split(":")
            length, _ = _multipart(50 * MB, "cut")
            head = "".join(
                f"{name}: {value}\r\n" for name, value in _upload_headers("cut", length).items()
            )
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(
                f"POST /v1/files HTTP/1.1\r\nhost: {host}\r\n{head}\r\n".encode()
                + b'--cut\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\n'
                + b"y" * MB
            )
            with trio.fail_after(10):  # the upstream starts spooling before the body ends
                while not _spooling():  # noqa: ASYNC110 -- another server's disk
                    await trio.sleep(0.01)
            await stream.aclose()
            with trio.fail_after(10):  # and drops the partial file once the client left
                while _spooling():  # noqa: ASYNC110 -- another server's disk
                    await trio.sleep(0.01)
            assert await _upstream_files(sim) == []
            assert [
                e["status"]
                for e in await sim.received()
                if e["method"] == "POST" and e["path"] == "/v1/files"
            ] == [
                None  # the simulator never answered: its request was cut mid-body
            ]
            client = anthropic_client(url)
            assert (await client.beta.files.list(betas=BETAS)).data == []
