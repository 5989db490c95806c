"""The process that runs models for an audit (isolate.py): `python -m gradaudit._child PARENT_PID SOCKET_FD`.
It dies with its parent, imports TensorFlow while the parent prepares the job, then serves that one job."""

import os
import socket
import sys


def main() -> None:
    parent, sock_fd = int(sys.argv[1]), int(sys.argv[2])
    from gradaudit.isolate import die_with_parent, send_frame, serve

    die_with_parent(parent)
    try:
        from gradaudit.batch import import_tensorflow_quietly

        import_tensorflow_quietly()
        import tensorflow as tf

        # Grappler's implementation selector swaps a call for another function of the same api_implements:
        # the gate walks those functions too (safety/gate.py); nothing here needs the swap, so it is off.
        tf.config.optimizer.set_experimental_options({"implementation_selector": False})
    except BaseException as exc:  # noqa: BLE001 - said to the parent, which reports it
        send_frame(socket.socket(fileno=sock_fd), "error", f"the process running the model could not start: "
                                                      f"{exc.__class__.__name__}: {exc}"[:4096])
        os._exit(1)
    serve(sock_fd)


if __name__ == "__main__":
    main()
