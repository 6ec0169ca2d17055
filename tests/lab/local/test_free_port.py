import socket

from gpuhint.lab.local.process import ephemeral_range, free_port, free_ports


def test_ports_lie_below_the_kernels_ephemeral_range_and_bind() -> None:
    low, _ = ephemeral_range()
    port = free_port()
    assert port < low
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


def test_one_process_never_hands_out_a_port_twice() -> None:
    ports = [free_port() for _ in range(100)]
    assert len(set(ports)) == len(ports)


def test_a_block_of_ports_is_consecutive_free_and_not_handed_out_again() -> None:
    low, _ = ephemeral_range()
    base = free_ports(4)
    assert base + 4 <= low
    assert all(free_port() not in range(base, base + 4) for _ in range(100))
