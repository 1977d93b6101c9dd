"""Every explorer connection sends without Nagle's delay (explorer/_guard.py says why): checked on the
server's own side of real connections to the real uvicorn server, as `profuse explore` configures it."""
from __future__ import annotations

import http.client
import socket
from typing import Any

import uvicorn
from explorer_util import serving

from profuse.explorer.server import create_app, listening_socket, server_config

TOKEN = "nodelay-test-token"


def app() -> Any:
    return create_app([], token=TOKEN)


def _server_side_no_delay(sock: socket.socket, config: Any) -> list[int]:
    """TCP_NODELAY of the server's socket of each open connection, after one request on it."""
    port = sock.getsockname()[1]
    with serving(sock, config) as server:
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            client.request("GET", f"/api/runs?token={TOKEN}")
            reply = client.getresponse()
            reply.read()
            assert reply.status == 200
            conns = list(server.server_state.connections)  # kept alive: still open here
            return [c.transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                    for c in conns]
        finally:
            client.close()


def test_profuse_explore_connections_send_without_delay() -> None:
    flags = _server_side_no_delay(listening_socket(), server_config(app()))
    assert flags and all(flags), flags


def test_the_guard_turns_the_delay_off_even_on_a_listening_socket_made_without_tcp_proto() -> None:
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0: asyncio leaves Nagle on
    plain.bind(("127.0.0.1", 0))
    flags = _server_side_no_delay(plain, server_config(app()))
    assert flags and all(flags), flags


def test_the_listening_socket_alone_gets_the_delay_turned_off_by_asyncio() -> None:
    config = uvicorn.Config(app(), log_level="warning", lifespan="off")  # uvicorn's own protocol
    flags = _server_side_no_delay(listening_socket(), config)
    assert flags and all(flags), flags


def test_without_either_nagle_stays_on() -> None:
    """The control: what the explorer did before (so the checks above can fail)."""
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    plain.bind(("127.0.0.1", 0))
    flags = _server_side_no_delay(plain, uvicorn.Config(app(), log_level="warning", lifespan="off"))
    assert flags and not any(flags), flags
