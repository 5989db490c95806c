"""The least power the platform offers to the process that runs a model, applied to that process itself
before TensorFlow is imported: Landlock (Linux) lets it read only the model, the Python environment and the
system's shared libraries, write only its own temporary folder and open no TCP connection; a network
namespace, where the process may make one, takes the rest of the network away; RLIMIT_DATA backs up the
memory limit the parent watches (isolate.py). A child forked from the server that preloaded TensorFlow
(isolate.prestart) confines itself the same way, after that import and before it reads anything of the
model."""

from __future__ import annotations

import os
import sys

from ..model import Isolation

# Read-only: what the interpreter, TensorFlow and the C library open at start-up and while running a model
# (found by tracing a whole audit: shared libraries and their cache, locales, CPU topology, time zone).
SYSTEM_READ = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/share/locale",
               "/etc/ld.so.cache", "/etc/localtime", "/proc/cpuinfo", "/proc/self", "/sys/devices/system/cpu",
               "/dev/urandom", "/usr/lib/ssl/openssl.cnf")
# Read and write: the one device the child writes to besides its folder (its standard error goes there).
SYSTEM_WRITE = ("/dev/null",)

_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000


def environment_paths() -> list[str]:
    """The Python environment: its prefixes, the gradaudit package and every folder on sys.path
    (site-packages, an editable install's source folder) but the working folder, which `python -m` puts
    there and which may be anything (a home folder, a checkout with its secrets)."""
    cwd = os.getcwd()
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    paths.update(p for p in sys.path if p and os.path.abspath(p) != cwd)
    return sorted(p for p in paths if os.path.exists(p))


def _unshare_network() -> str | None:
    """A network namespace of the process's own (only loopback, down), or why not. As root it is one call;
    otherwise a user namespace comes first, where the kernel allows unprivileged ones."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) == 0:
        return None
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        return f"no network namespace ({os.strerror(ctypes.get_errno())})"
    try:  # keep the same user and group inside, so that files stay the process's own
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
    except OSError as exc:
        return f"no network namespace ({exc.strerror or exc})"
    return None


def _landlock(read: list[str], write: list[str]) -> tuple[int, str | None]:
    """Enforce a Landlock ruleset on this process (single-threaded: before TensorFlow starts its threads).
    Returns the ABI in force (0: none) and why not."""
    try:
        import landlockpy
        from landlockpy import AccessFS, AccessNet, Ruleset, Scope
    except ImportError:
        return 0, "the landlockpy package is not installed"
    abi = landlockpy.abi_version()
    if abi < 1:
        return 0, "this kernel does not offer Landlock"
    fs = landlockpy.fs_for_abi(abi)
    with Ruleset(handled_fs=fs, handled_net=AccessNet.BIND_TCP | AccessNet.CONNECT_TCP,
                 scoped=Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL) as ruleset:
        for path, writable in [*((p, False) for p in read), *((p, True) for p in write)]:
            if not os.path.exists(path):
                continue
            if os.path.isdir(path):
                access = fs & ~AccessFS.EXECUTE if writable else AccessFS.READ_FILE | AccessFS.READ_DIR
            else:  # a file takes no folder rights
                access = AccessFS.READ_FILE | (AccessFS.WRITE_FILE | AccessFS.TRUNCATE if writable else 0)
            ruleset.allow_path(path, access & fs)
        ruleset.restrict()
    return abi, None


def _data_in_use() -> int:
    """Bytes of the process's data segment now (Linux: VmData); 0 where /proc does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _memory_cap(limit: int | None) -> str | None:
    """RLIMIT_DATA, not RLIMIT_AS: TensorFlow maps close to 2 GB of address space (libraries, reserved arenas)
    before it allocates a tensor, while RLIMIT_DATA counts the private memory it may write. An allocation past
    the cap fails inside TensorFlow as an out-of-memory error."""
    if limit is None:
        return None
    import resource  # POSIX only

    # A child forked from the server that imported TensorFlow (isolate.prestart) starts with that import's
    # data: the cap is on what it adds, as for a child that imports TensorFlow after setting it.
    limit += _data_in_use()
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    except (ValueError, OSError) as exc:
        return f"no memory cap ({exc})"
    return None


def _file_size_cap(readable: tuple[str, ...]) -> tuple[int | None, str | None]:
    """RLIMIT_FSIZE: the largest file the process needs to write is its float64 copy of the model (twice the
    model's bytes at most); a model allowed to write files (--allow-unsafe-ops) cannot fill the disk with
    one. Python ignores SIGXFSZ, so a write past the cap fails (EFBIG) instead of killing the process."""
    import resource

    total = 0
    for root in readable:
        for folder, _, files in os.walk(root) if os.path.isdir(root) else [("", [], [root])]:
            total += sum(os.lstat(os.path.join(folder, f)).st_size for f in files
                         if os.path.isfile(os.path.join(folder, f)))
    cap = 2 * total + (1 << 30)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
    except (ValueError, OSError) as exc:
        return None, f"no file size cap ({exc})"
    return cap, None


def confine(readable: tuple[str, ...], tmp: str, memory_limit: int | None) -> Isolation:
    """Confine the calling process for good: read `readable` (the model, --inputs) and the environment,
    write only `tmp`. The time budget is the parent's to enforce (and to fill in)."""
    missing = []
    if not sys.platform.startswith("linux"):
        return Isolation(None, None, None, None, (f"no isolation is implemented on {sys.platform}",))
    why_memory = _memory_cap(memory_limit)
    if why_memory:
        missing.append(why_memory)
    file_size, why_file_size = _file_size_cap(readable)
    if why_file_size:
        missing.append(why_file_size)
    why_netns = _unshare_network()
    if why_netns:
        missing.append(why_netns)
    read = [*(os.path.realpath(p) for p in readable), *environment_paths(), *SYSTEM_READ]
    abi, why_landlock = _landlock(read, [os.path.realpath(tmp), *SYSTEM_WRITE])
    if why_landlock:
        missing.append(why_landlock)
    network = "+".join(part for part, on in (("landlock", abi >= 4), ("netns", not why_netns)) if on) or None
    return Isolation(f"landlock-abi{abi}" if abi else None, network, None if why_memory else memory_limit, None,
                     tuple(missing), file_size)


def default_memory_limit() -> int | None:
    """Half of the machine's physical memory: room for TensorFlow and a model's float64 copy, while a runaway
    allocation ends in the child, not in the machine's swap. None where the platform does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return None


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_memory_limit(value: str | int) -> int:
    """`--memory-limit`: bytes, or a number with K, M, G or T (binary units, `4G`, `512MiB`); 0 or `none`:
    no limit (returned as 0). ValueError for anything else."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    text = str(value).strip().lower()
    if text == "none":
        return 0
    number = text.rstrip("kmgtib")
    unit = text[len(number):].removesuffix("ib").removesuffix("b")
    try:
        amount = float(number)
    except ValueError:
        amount = -1.0
    if unit not in _UNITS or not 0 <= amount < float(1 << 62):
        raise ValueError(f"{value!r}: expected a size such as 4G, 512M or 0 (no limit)")
    return int(amount * _UNITS[unit])
