"""The devcluster's certificates and kubeconfigs: a CA that signs the serving and client certificates,
the front-proxy CA, the service-account keys, all made with the `openssl` command in a PKI directory."""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from devutil import DevclusterError

EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
CA_EXTENSIONS = (
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
)
APISERVER_SANS = [
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
    "IP:127.0.0.1",
    "IP:10.96.0.1",  # first address of SERVICE_CIDR: the `kubernetes` Service
]
CLIENTS = {
    "admin": "/O=system:masters/CN=admin",
    "kube-controller-manager": "/CN=system:kube-controller-manager",
    "kube-scheduler": "/CN=system:kube-scheduler",
    # kwok plays every kubelet (node status, leases, pod status and deletion); kept simple here.
    "kwok": "/O=system:masters/CN=kwok-controller",
    # the apiserver's client certificate towards real kubelets (logs, exec)
    "kube-apiserver-kubelet-client": "/O=system:masters/CN=kube-apiserver-kubelet-client",
}


def openssl(*args: str | Path) -> None:
    proc = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DevclusterError(f"openssl {' '.join(map(str, args[:2]))} failed: {proc.stderr.strip()}")




def ensure_pki(pki: Path, extra_sans: Sequence[str] = ()) -> None:
    """Create a CA, serving/client certificates and service-account keys (kept across restarts).
    `extra_sans` (a real node's host address) re-issue the apiserver's certificate when they change."""
    sans = [*APISERVER_SANS, *extra_sans]
    sans_file = pki / "apiserver.sans"
    needed = [
        "ca.crt",
        "ca.key",
        "sa.key",
        "sa.pub",
        "apiserver.crt",
        "apiserver.key",
        "front-proxy-ca.crt",
        "front-proxy-client.crt",
        "front-proxy-client.key",
    ]
    needed += [f"{c}.crt" for c in CLIENTS] + [f"{c}.key" for c in CLIENTS]
    fresh = all((pki / n).exists() for n in needed)
    if fresh and time.time() - (pki / "ca.crt").stat().st_mtime < 300 * 86400:
        if not sans_file.exists() or sans_file.read_text() != "\n".join(sans):
            leaf(pki, "apiserver", "/CN=kube-apiserver", "serverAuth", sans)
            sans_file.write_text("\n".join(sans))
        return
    shutil.rmtree(pki, ignore_errors=True)
    pki.mkdir(parents=True, mode=0o700)
    p = pki
    # "ca" signs everything; "front-proxy-ca" only the aggregation-layer client (requestheader).
    for ca, cn in (("ca", "devcluster-ca"), ("front-proxy-ca", "devcluster-front-proxy-ca")):
        args = ["req", "-x509", "-new", *EC_KEY, *CA_EXTENSIONS, "-days", "3650", "-subj", f"/CN={cn}"]
        openssl(*args, "-keyout", p / f"{ca}.key", "-out", p / f"{ca}.crt")
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", p / "sa.key")
    openssl("ec", "-in", p / "sa.key", "-pubout", "-out", p / "sa.pub")
    leaf(pki, "apiserver", "/CN=kube-apiserver", "serverAuth", sans)
    sans_file.write_text("\n".join(sans))
    for name, subject in CLIENTS.items():
        leaf(pki, name, subject, "clientAuth", [])
    leaf(pki, "front-proxy-client", "/CN=front-proxy-client", "clientAuth", [], ca="front-proxy-ca")
    for f in p.iterdir():
        f.chmod(0o600)

def leaf(pki: Path, name: str, subject: str, usage: str, sans: list[str], ca: str = "ca") -> None:
    """Issue `name`.crt/.key in `pki`, signed by its CA `ca`."""
    p = pki
    ext = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
    ext.append(f"extendedKeyUsage={usage}")
    if sans:
        ext.append("subjectAltName=" + ",".join(sans))
    extfile, csr = p / f"{name}.ext", p / f"{name}.csr"
    extfile.write_text("\n".join(ext) + "\n")
    openssl("req", "-new", *EC_KEY, "-keyout", p / f"{name}.key", "-out", csr, "-subj", subject)
    serial = str(int.from_bytes(os.urandom(8), "big"))
    ca_args: list[str | Path] = ["-CA", p / f"{ca}.crt", "-CAkey", p / f"{ca}.key", "-set_serial", serial]
    io_args: list[str | Path] = ["-extfile", extfile, "-in", csr, "-out", p / f"{name}.crt"]
    openssl("x509", "-req", "-days", "365", *ca_args, *io_args)
    csr.unlink()
    extfile.unlink()
    (p / f"{name}.key").chmod(0o600)

def write_kubeconfig(pki: Path, path: Path, user: str, port: int, host: str = "127.0.0.1") -> None:
    """A kubeconfig at `path` for `user` (its certificate in `pki`) of the API server at host:port."""
    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "devcluster",
                "cluster": {
                    "server": f"https://{host}:{port}",
                    "certificate-authority-data": b64("ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(f"{user}.crt"),
                    "client-key-data": b64(f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": user}}],
        "current-context": "devcluster",
        "preferences": {},
    }
    # JSON is valid YAML; every kubeconfig reader accepts it.
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)


def admin_ssl_context(pki: Path) -> ssl.SSLContext:
    """TLS to the API server as the cluster's admin."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx
