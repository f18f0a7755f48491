"""The local control plane's keys and certificates, made fresh for each start.

One CA signs the API server's serving certificate (for 127.0.0.1 and localhost only), the one the
lab's controllers serve their admission webhooks with (127.0.0.1), and a client certificate per
identity (the admin in system:masters, and the controller manager, the scheduler and kwok under the
user names their built-in RBAC roles expect). A separate RSA key signs service-account
tokens. Everything is written under the cluster's folder and lives as long as the cluster does.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from localcluster.nodes import REAL_NODE_NAME

VALID_FOR = datetime.timedelta(days=7)


@dataclass(frozen=True)
class Identity:
    """A client certificate's subject: CN is the Kubernetes user name, O its groups."""

    file: str
    user: str
    groups: tuple[str, ...] = ()


ADMIN = Identity("admin", "local-admin", ("system:masters",))
CONTROLLER_MANAGER = Identity("kube-controller-manager", "system:kube-controller-manager")
SCHEDULER = Identity("kube-scheduler", "system:kube-scheduler")
# kwok writes node and pod status for every node it simulates: an admin identity, as kwokctl gives it.
KWOK = Identity("kwok", "kwok-controller", ("system:masters",))
# The real node (localcluster.realnode): its kubelet as the Node authorizer expects it, kube-proxy as the
# default ClusterRoleBinding system:node-proxier names it, CoreDNS bound to its own ClusterRole, and the API
# server's identity towards kubelets (allowed by the kubelet's webhook authorisation as a cluster admin).
NODE = Identity("node", f"system:node:{REAL_NODE_NAME}", ("system:nodes",))
KUBE_PROXY = Identity("kube-proxy", "system:kube-proxy")
COREDNS = Identity("coredns", "gke-ml-labs:coredns")
KUBELET_CLIENT = Identity("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
# The API server's identity towards aggregated API servers (KEDA's metrics server): the name its
# --requestheader-allowed-names trusts to say who the user is.
FRONT_PROXY = Identity("front-proxy-client", "front-proxy-client")
CLIENTS = (ADMIN, CONTROLLER_MANAGER, SCHEDULER, KWOK, NODE, KUBE_PROXY, COREDNS, KUBELET_CLIENT, FRONT_PROXY)
WEBHOOKS = "webhooks"  # the serving pair of the lab's controllers' admission webhooks (127.0.0.1)


@dataclass(frozen=True)
class Pki:
    folder: Path

    def cert(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    @property
    def ca(self) -> Path:
        return self.cert("ca")

    @property
    def service_account_key(self) -> Path:
        return self.key("service-account")

    @property
    def service_account_pub(self) -> Path:
        return self.folder / "service-account.pub"


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(common_name: str, organisations: tuple[str, ...] = ()) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organisations]
    return x509.Name([*parts, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: x509.Name, key, issuer: x509.Name, signer, *, ca: bool, usages, sans=(), valid_for: datetime.timedelta = VALID_FOR
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        ).add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(signer, hashes.SHA256())


def generate(folder: Path) -> Pki:
    """A CA, the API server's serving pair, one client pair per identity, and the token-signing key."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(folder)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("gke-ml-labs local cluster CA")
    ca_cert = _certificate(ca_name, ca_key, ca_name, ca_key, ca=True, usages=())
    _write_key(pki.key("ca"), ca_key)
    pki.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    def issue(name: str, subject: x509.Name, usages, sans=()) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(subject, key, ca_name, ca_key, ca=False, usages=usages, sans=sans)
        _write_key(pki.key(name), key)
        pki.cert(name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    issue(
        "apiserver",
        _name("kube-apiserver"),
        [ExtendedKeyUsageOID.SERVER_AUTH],
        # Loopback only, plus the in-cluster names a client inside the cluster would use.
        [
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes.default.svc"),
        ],
    )
    # The lab's controllers (localcluster.controllers) serve their admission webhooks on loopback with it.
    issue(WEBHOOKS, _name("local webhooks"), [ExtendedKeyUsageOID.SERVER_AUTH], [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    for identity in CLIENTS:
        issue(identity.file, _name(identity.user, identity.groups), [ExtendedKeyUsageOID.CLIENT_AUTH])

    # The service-account issuer's key: RSA, the algorithm every token verifier accepts.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.service_account_key, sa_key)
    pki.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki


def issue_pair(pki: Pki, name: str, dns_names: list[str], ips: list[str]) -> None:
    """A pair `name` signed by the cluster's CA that serves `dns_names` and `ips` and is also a client
    certificate: KEDA's operator and metrics server authenticate each other with one such pair, as KEDA's
    own certificate manager makes it."""
    ca_key = serialization.load_pem_private_key(pki.key("ca").read_bytes(), None)
    ca_name = x509.load_pem_x509_certificate(pki.ca.read_bytes()).subject
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.DNSName(d) for d in dns_names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = _certificate(_name(dns_names[0]), key, ca_name, ca_key, ca=False,
                        usages=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], sans=sans)  # fmt: skip
    _write_key(pki.key(name), key)
    pki.cert(name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))


# cert-controller (Kueue's own certificate management) keeps a Secret's pair only if both stay valid
# 90 days ahead, and its CA for the DNS name of the CA's name (open-policy-agent/cert-controller rotator).
ROTATOR_VALID_FOR = datetime.timedelta(days=365)


def rotator_secret(ca_name: str, service_dns: str) -> dict[str, bytes]:
    """A Secret's data (ca.crt, ca.key, tls.crt, tls.key) that cert-controller keeps as it is: a CA named
    `ca_name` and a serving pair for `service_dns` that also serves 127.0.0.1, where our webhooks listen."""
    def pem_key(key: rsa.RSAPrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())  # fmt: skip

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_subject = _name(ca_name)
    ca_cert = _certificate(ca_subject, ca_key, ca_subject, ca_key, ca=True, usages=(),
                           sans=[x509.DNSName(ca_name)], valid_for=ROTATOR_VALID_FOR)  # fmt: skip
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = _certificate(_name(service_dns), key, ca_subject, ca_key, ca=False, usages=[ExtendedKeyUsageOID.SERVER_AUTH],
                        sans=[x509.DNSName(service_dns), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
                        valid_for=ROTATOR_VALID_FOR)  # fmt: skip
    return {
        "ca.crt": ca_cert.public_bytes(serialization.Encoding.PEM),
        "ca.key": pem_key(ca_key),
        "tls.crt": cert.public_bytes(serialization.Encoding.PEM),
        "tls.key": pem_key(key),
    }
