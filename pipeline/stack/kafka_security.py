"""The secured local broker's materials: a CA and certificates for loopback names (``openssl``), SCRAM
passwords per kubetape principal (made at format time), the ACLs of each principal, and the client
properties files a kubetape component is given with ``--kafka-config``.

One secured broker serves both ways in: SASL_SSL with SCRAM on the client port, and mutual TLS (the
certificate's CN is the principal) on a second port, so one broker start proves both. The controller
listener stays PLAINTEXT on loopback, so the controller's own principal (ANONYMOUS) is a super user.

The client port also takes OAUTHBEARER, checked by Kafka's own unsecured-token validator (its default
without an identity provider): it takes any unsigned token whose ``exp`` is to come, for the principal
its ``sub`` names (:func:`unsecured_token`). That proves what a client does with its token (read from
its file at each login, refused once it expired, renewed while running), not how tokens are validated;
and any local process can log in as any principal that way, so this stack protects nothing.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.processes import require_tool

SECURITY_MODES = ("plaintext", "sasl-ssl", "mtls")
ADMIN = "admin"
PRINCIPALS = (ADMIN, "watcher", "sink", "replayer", "analytics")
BROKER_HOST = "localhost"
"""The name in the broker's certificate (and its advertised listeners); 127.0.0.1 is deliberately not
in it, so a client that dials the address instead of the name sees a host name mismatch."""
SCRAM = "SCRAM-SHA-512"
REAUTH_SHA256_MS = 8_000
"""How long the secured broker's SCRAM-SHA-256 sessions last (see :func:`server_properties`)."""
REAUTH_OAUTH_MS = 8_000
"""How long the secured broker's OAUTHBEARER sessions last at most (a token's ``exp`` ends them sooner)."""
_EVENTS, _STATE, _RESUME, _USAGE, _DEADLETTER = (
    "kubetape.events",
    "kubetape.state",
    "kubetape.watch-resume",
    "kubetape.usage",
    "kubetape.deadletter",
)
ACLS: dict[str, list[tuple[str, str, str, str]]] = {
    # principal: (resource type, pattern type, name, operation), in the Java enums' names
    "watcher": [
        *(
            ("TOPIC", "LITERAL", topic, op)
            for topic in (_EVENTS, _STATE, _RESUME, _USAGE, _DEADLETTER)
            for op in ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS", "CREATE")
        ),
        *(("TOPIC", "LITERAL", topic, "READ") for topic in (_STATE, _RESUME)),  # read back at start
    ],
    "sink": [
        *(("TOPIC", "LITERAL", _EVENTS, op) for op in ("READ", "DESCRIBE", "DESCRIBE_CONFIGS")),
        *(("TOPIC", "LITERAL", _USAGE, op) for op in ("READ", "DESCRIBE")),  # the recorded load
        *(("TOPIC", "LITERAL", _DEADLETTER, op) for op in ("WRITE", "DESCRIBE")),
        ("GROUP", "PREFIXED", "kubetape-sink", "READ"),  # kubetape-sink, .<cluster>, .usage
    ],
    "replayer": [("TOPIC", "LITERAL", _EVENTS, op) for op in ("READ", "DESCRIBE")],
    "analytics": [
        *(("TOPIC", "LITERAL", _EVENTS, op) for op in ("READ", "DESCRIBE")),
        ("GROUP", "PREFIXED", "kubetape-analytics", "READ"),
    ],
}


@dataclass(frozen=True, slots=True)
class SecurityFiles:
    """Where the secured broker's materials live (under the broker's home, mode 0700)."""

    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.crt"

    @property
    def broker_keystore(self) -> Path:
        return self.root / "broker.pem"

    def password_file(self, principal: str) -> Path:
        return self.root / f"{principal}.password"

    def password(self, principal: str) -> str:
        return self.password_file(principal).read_text().strip()

    def certificate(self, principal: str) -> Path:
        return self.root / f"{principal}.crt"

    def key(self, principal: str) -> Path:
        return self.root / f"{principal}.key"

    def client_config(self, principal: str, mode: str) -> Path:
        """The ``--kafka-config`` file of ``principal`` for ``mode`` (``sasl-ssl`` or ``mtls``)."""
        return self.root / "clients" / f"{principal}-{mode}.properties"

    @property
    def acl_file(self) -> Path:
        return self.root / "acls.txt"


def make_materials(files: SecurityFiles, broker_port: int, mtls_port: int) -> None:
    """Create the CA, the broker's and each principal's certificate and the passwords, once."""
    if files.broker_keystore.exists():
        return
    openssl = require_tool("openssl", "make the secured broker's certificates")
    files.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    (files.root / "clients").mkdir(exist_ok=True, mode=0o700)
    ca_key = files.root / "ca.key"
    _run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(ca_key), "-out", str(files.ca), "-days", "3650", "-subj", "/CN=kubetape-local-ca",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    )  # fmt: skip
    for principal in ("broker", *PRINCIPALS):
        _issue(
            openssl,
            files,
            principal,
            files.certificate(principal),
            files.key(principal),
            server=principal == "broker",
        )
    files.broker_keystore.write_text(
        files.key("broker").read_text() + files.certificate("broker").read_text()
    )
    for principal in PRINCIPALS:
        _private(files.password_file(principal), secrets.token_urlsafe(24) + "\n")
        _write_client_configs(files, principal, broker_port, mtls_port)
    files.acl_file.write_text(
        "".join(f"{who} {' '.join(acl)}\n" for who, acls in ACLS.items() for acl in acls)
    )


def issue_client_certificate(
    files: SecurityFiles, principal: str, certificate: Path, key: Path, *, expired: bool = False
) -> None:
    """A new certificate and key for ``principal`` signed by the stack's CA, written to ``certificate``
    and ``key`` (not the stack's own files, which other clients use); ``expired``: its validity ended a
    day before it was made (notBefore now, notAfter a day earlier), what the brokers refuse as expired.
    Renewing a client certificate while a component runs is tested with these."""
    openssl = require_tool("openssl", "make the secured broker's certificates")
    _issue(openssl, files, principal, certificate, key, server=False, days=-1 if expired else 3650)


def unsecured_token(principal: str, lifetime_s: float, now: float | None = None) -> str:
    """An OAUTHBEARER token the secured broker takes for ``principal`` (see the module docstring) until
    ``lifetime_s`` from ``now``; a negative lifetime makes one that expired that long ago."""
    now = time.time() if now is None else now
    header = {"alg": "none"}
    claims = {"sub": principal, "iat": min(now, now + lifetime_s) - 60, "exp": now + lifetime_s}
    return f"{_b64url(header)}.{_b64url(claims)}."


def _b64url(value: Mapping[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _issue(
    openssl: str,
    files: SecurityFiles,
    principal: str,
    cert: Path,
    key: Path,
    *,
    server: bool,
    days: int = 3650,
) -> None:
    ca_key = files.root / "ca.key"  # made by make_materials
    csr, ext = cert.with_suffix(".csr"), cert.with_suffix(".ext")
    names = f"subjectAltName=DNS:{BROKER_HOST}\n" if server else ""
    ext.write_text(f"{names}authorityKeyIdentifier=keyid\nbasicConstraints=CA:FALSE\n")
    _run(
        [openssl, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={principal}"]
    )  # fmt: skip
    _run(
        [openssl, "x509", "-req", "-in", str(csr), "-CA", str(files.ca), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(cert), "-days", str(days), "-extfile", str(ext)]
    )  # fmt: skip
    key.chmod(0o600)
    csr.unlink()
    ext.unlink()


def _write_client_configs(files: SecurityFiles, principal: str, broker_port: int, mtls_port: int) -> None:
    _private(
        files.client_config(principal, "sasl-ssl"),
        f"bootstrap.servers={BROKER_HOST}:{broker_port}\nsecurity.protocol=SASL_SSL\n"
        f"sasl.mechanism={SCRAM}\nsasl.username={principal}\nsasl.password={files.password(principal)}\n"
        f"ssl.ca.location={files.ca}\n",
    )
    _private(
        files.client_config(principal, "mtls"),
        f"bootstrap.servers={BROKER_HOST}:{mtls_port}\nsecurity.protocol=SSL\nssl.ca.location={files.ca}\n"
        f"ssl.certificate.location={files.certificate(principal)}\nssl.key.location={files.key(principal)}\n",
    )


def _private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"{' '.join(argv[:3])} failed: {(result.stdout + result.stderr).strip()[-600:]}")


def server_properties(
    files: SecurityFiles, broker_port: int, mtls_port: int, controller_port: int
) -> list[str]:
    """The listener, TLS, SASL and authorizer lines of the secured broker's ``server.properties``."""
    admin_jaas = (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN}" '
        f'password="{files.password(ADMIN)}";'
    )
    return [
        f"listeners=CLIENT://127.0.0.1:{broker_port},MTLS://127.0.0.1:{mtls_port},"
        f"CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=CLIENT://{BROKER_HOST}:{broker_port},MTLS://{BROKER_HOST}:{mtls_port}",
        "inter.broker.listener.name=CLIENT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,CLIENT:SASL_SSL,MTLS:SSL",
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        f"sasl.mechanism.inter.broker.protocol={SCRAM}",
        # every enabled mechanism needs its login module on the listener, not only the inter-broker one
        f"listener.name.client.scram-sha-512.sasl.jaas.config={admin_jaas}",
        f"listener.name.client.scram-sha-256.sasl.jaas.config={admin_jaas}",
        # A login is checked when a connection opens; a broker that bounds its sessions closes the
        # connections of clients that do not re-authenticate (aiokafka cannot), so a changed password
        # takes effect. Only SCRAM-SHA-256 sessions are bounded here: kubetape's clients use SCRAM-SHA-512,
        # and a test that rotates a password logs in with SCRAM-SHA-256 to see it within seconds.
        f"listener.name.client.scram-sha-256.connections.max.reauth.ms={REAUTH_SHA256_MS}",
        # OAUTHBEARER with the unsecured-token validator (module docstring); the login module is the
        # broker's own, needed for every enabled mechanism. Sessions end when the token expires or after
        # REAUTH_OAUTH_MS, so a token that expires while a client runs is met within seconds.
        "listener.name.client.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer."
        f'OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="{ADMIN}";',
        f"listener.name.client.oauthbearer.connections.max.reauth.ms={REAUTH_OAUTH_MS}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={files.broker_keystore}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={files.ca}",
        "listener.name.mtls.ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([a-zA-Z0-9.-]+)$/$1/,DEFAULT",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        f"super.users=User:{ADMIN};User:ANONYMOUS",
    ]


def scram_format_args(files: SecurityFiles) -> list[str]:
    """``--add-scram`` arguments of ``kafka-storage format``: both SCRAM mechanisms for every principal,
    so the broker can authenticate its own inter-broker connection before any metadata exists."""
    args: list[str] = []
    for principal in PRINCIPALS:
        for mechanism in ("SCRAM-SHA-256", SCRAM):
            args += ["--add-scram", f"{mechanism}=[name={principal},password={files.password(principal)}]"]
    return args


def java_admin_properties(files: SecurityFiles, broker_port: int) -> Path:
    """The admin's connection for Kafka's own Java tools (the ACL set-up)."""
    path = files.root / "admin-java.properties"
    _private(
        path,
        f"bootstrap.servers={BROKER_HOST}:{broker_port}\nsecurity.protocol=SASL_SSL\nsasl.mechanism={SCRAM}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN}" password="{files.password(ADMIN)}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={files.ca}\n",
    )
    return path
