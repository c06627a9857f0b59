"""A Certus client in Python on stubs generated from proto/ (see proto/README.md).

Checks the node's health, takes a lease, stores an HTTP-01 challenge token and reads it back,
and shows how a refusal carries its reason. Run against `certus up` (TLS, from the folder `up`
ran in) or `certus up --plaintext`:

    python proto/examples/client.py --pki certus-data/pki
    python proto/examples/client.py --plaintext
"""

import argparse
import pathlib
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc  # grpcio-health-checking

sys.path.insert(0, "gen")  # where the stubs were generated
from certus.v1 import leases_pb2, leases_pb2_grpc  # noqa: E402


def channel(args):
    if args.plaintext:
        return grpc.insecure_channel(args.endpoint)
    pki = pathlib.Path(args.pki)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.pem").read_bytes(),
        private_key=(pki / f"{args.identity}-key.pem").read_bytes(),
        certificate_chain=(pki / f"{args.identity}.pem").read_bytes(),
    )
    return grpc.secure_channel(args.endpoint, credentials)


def reason(error):
    """The stable reason of a refusal: the `certus-error` trailing metadata entry."""
    return dict(error.trailing_metadata() or ()).get("certus-error", "")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", default="127.0.0.1:7101")
    parser.add_argument("--plaintext", action="store_true")
    parser.add_argument("--pki", default="certus-data/pki")
    parser.add_argument("--identity", default="admin", help="NAME of NAME.pem in --pki")
    args = parser.parse_args()
    with channel(args) as chan:
        health = health_pb2_grpc.HealthStub(chan)
        for service in ["", "liveness", "certus.v1.Leases"]:
            status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            print(f"health {service or '(node)'}:", health_pb2.HealthCheckResponse.ServingStatus.Name(status.status))

        leases = leases_pb2_grpc.LeasesStub(chan)
        lease = leases.Acquire(leases_pb2.AcquireRequest(name="jobs/renewal", holder="py-1", ttl_ms=30_000))
        print("lease jobs/renewal: fencing token", lease.lease.fencing_token)

        leases.PutChallenge(leases_pb2.PutChallengeRequest(token="py-token", key_authorization="py-token.thumbprint"))
        got = leases.GetChallenge(leases_pb2.GetChallengeRequest(token="py-token"))
        print("challenge py-token:", got.key_authorization)

        try:
            leases.Acquire(leases_pb2.AcquireRequest(name="jobs/renewal", holder="py-1", ttl_ms=1))
        except grpc.RpcError as error:
            print("refused:", error.code().name, reason(error), "-", error.details())


if __name__ == "__main__":
    main()
