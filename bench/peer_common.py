"""What the two peer scripts (peer_producer.py, peer_consumer.py) share:
the connection, plain or strong, and the figures they report about
themselves."""
import resource

import redis
import redis.connection
import redis.utils


def connect(port, strong):
    """(client, whether it parses replies with hiredis). Strong: redis-py
    picks python3-hiredis's parser by itself when it is installed; plain:
    the pure-Python parser even then, as a first version would run."""
    if strong:
        return redis.Redis(host="127.0.0.1", port=port), redis.utils.HIREDIS_AVAILABLE
    return redis.Redis(connection_pool=redis.ConnectionPool(
        host="127.0.0.1", port=port, parser_class=redis.connection.PythonParser)), False


def peak_rss_kb():
    """VmHWM of this process (ru_maxrss would include the parent's size:
    Linux keeps it across execve)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def cpu_us():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int((ru.ru_utime + ru.ru_stime) * 1e6)
