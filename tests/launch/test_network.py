import os

import pytest

from distrl.launch.network import choose_interface, interface_address, interface_towards


def test_loopback_master_is_reached_through_lo() -> None:
    assert interface_towards("127.0.0.1") == "lo"
    assert interface_address("lo") == "127.0.0.1"


def test_choose_interface_respects_user_settings_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    assert choose_interface("127.0.0.1") == "lo"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    assert choose_interface("127.0.0.1") == "eth7"  # what the user set wins over detection
    assert choose_interface("127.0.0.1", override="ib0") == "ib0"
    assert os.environ["GLOO_SOCKET_IFNAME"] == os.environ["NCCL_SOCKET_IFNAME"] == "ib0"
