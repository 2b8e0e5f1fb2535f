#!/usr/bin/env python3
"""Ferry's probe of a replica from inside its container: GET / on the
inference server's port with the replica's secret, for an orchestrator
whose HTTP probes could send the secret only by writing it into the pod's
spec (Kubernetes' httpHeaders), where anyone who reads the spec sees it.
An exec probe runs this instead: it reads the secret from the container's
environment ($FERRY_REPLICA_SECRET, which the container gets from a
Kubernetes Secret) and sends it in X-Ferry-Replica-Secret, as Ferry's
gateway does.

Exit status 0 when the server answers 2xx or 3xx (what Kubernetes' own
HTTP probe counts as a success), 1 otherwise, with a line on stdout
saying what it got (the kubelet shows it in the probe's failure event).
It never prints the secret. Standard library only, Python 3.8 or later.
"""

import argparse
import http.client
import os
import sys

SECRET_ENV = "FERRY_REPLICA_SECRET"
SECRET_HEADER = "X-Ferry-Replica-Secret"


def main(argv=None):
    p = argparse.ArgumentParser(description="Probe Ferry's inference server with the replica's secret.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds for the whole exchange")
    args = p.parse_args(argv)
    secret = os.environ.get(SECRET_ENV, "")
    if not secret:
        print("$%s is empty: the replica's secret was not given to this container" % SECRET_ENV)
        return 1
    conn = http.client.HTTPConnection(args.host, args.port, timeout=args.timeout)
    try:
        conn.request("GET", "/", headers={SECRET_HEADER: secret, "Connection": "close"})
        resp = conn.getresponse()
        body = resp.read(512)
    except (OSError, http.client.HTTPException) as e:
        print("GET / on %s port %d: %s" % (args.host, args.port, e))
        return 1
    finally:
        conn.close()
    if 200 <= resp.status < 400:
        return 0
    print("GET / on %s port %d: %d %s" % (args.host, args.port, resp.status,
                                         body.decode("utf-8", "replace").strip()))
    return 1


if __name__ == "__main__":
    sys.exit(main())
