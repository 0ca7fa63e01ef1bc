"""What the HTTP server's tests share: running an app under uvicorn on 127.0.0.1 in a thread, reading a
server-sent-event stream, and the checks of OpenAI's error object."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, Dict, Iterator, List

import httpx


class ThreadServer:
    """The app under uvicorn on a free port of 127.0.0.1, in a thread (no signal handlers)."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start in 20 s"
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


def events(response: httpx.Response) -> Iterator[Any]:
    """The JSON objects of an SSE stream, then the string "[DONE]"."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[6:]
            yield data if data == "[DONE]" else json.loads(data)
        else:
            assert line == "", f"not an SSE data line: {line!r}"


def stream_completion(client: httpx.Client, path: str, body: Dict[str, Any]) -> List[Any]:
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(events(response))


def assert_error(response: httpx.Response, status: int, *words: str, param: Any = "any") -> Dict[str, Any]:
    """The response is OpenAI's error object with this status, its message naming every word."""
    assert response.status_code == status, (response.status_code, response.text)
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    for word in words:
        assert word in error["message"], (word, error["message"])
    if param != "any":
        assert error["param"] == param, error
    return error
