"""How every kubetape client authenticates to Kafka and checks the broker: one frozen
:class:`KafkaSecurity`, read from a Kafka-style properties file (``--kafka-config FILE``) and the
environment, with the ecosystem's property names so a user's existing client file reads as it is.

Secrets (``sasl.password``, ``ssl.key.password``) come only from that file or the environment, never
from a flag, and are held in :class:`Secret`, whose ``repr`` and ``str`` are masked: a settings object
logged, printed in a report or shown in an error carries no password. A password may also live in a file
of its own (``sasl.password.file``, kubetape's name like ``sasl.oauthbearer.token.file``), read whenever a
client is built: a password rotated in a Secret mounted as a file reaches the next connection without a
restart (see :mod:`pipeline.io.kafka.access`).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.io.kafka.properties import PropertiesError, Property, parse_properties, properties_dict
from pipeline.io.kafka.tls import ClientTLS
from pipeline.model.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
ENV_PREFIX = "KUBETAPE_KAFKA_"
"""``security.protocol`` is also ``$KUBETAPE_KAFKA_SECURITY_PROTOCOL``: the property name upper-cased,
dots as underscores; the environment wins over the file."""

BOOTSTRAP_PROPERTY = "bootstrap.servers"
_PROPERTIES = (
    BOOTSTRAP_PROPERTY,
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.password.file",
    "sasl.oauthbearer.token.file",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
)
_EITHER = {"sasl.password": "sasl.password.file", "sasl.password.file": "sasl.password"}
_ALIASES = {"sasl.mechanisms": "sasl.mechanism"}  # librdkafka's spelling
_JAVA_ONLY = {
    "sasl.jaas.config": "set sasl.username and sasl.password instead",
    "ssl.truststore.location": "export the CA as PEM and set ssl.ca.location",
    "ssl.keystore.location": "export the certificate and key as PEM: ssl.certificate.location, "
    "ssl.key.location",
}


class Secret:
    """A value that must not be shown: masked in ``repr``/``str``; :meth:`reveal` hands it to the client."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """The connection security of every client (producer, consumer, admin); PLAINTEXT by default."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: Secret | None = field(default=None, repr=False)
    password_file: Path | None = None
    """``sasl.password.file``: the password is read from it each time a client is built (see
    :meth:`current_password`) instead of once."""
    oauth_token_file: Path | None = None
    ca_location: Path | None = None
    certificate_location: Path | None = None
    key_location: Path | None = None
    key_password: Secret | None = field(default=None, repr=False)
    check_hostname: bool = True
    """``ssl.endpoint.identification.algorithm``: ``https`` (default) checks the broker's name; ``none``
    (empty) does not."""

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def current_password(self) -> Secret | None:
        """The password to log in with now: read from ``password_file`` at each call (a rotated Secret
        is picked up by the next client built), else the one given."""
        if self.password_file is None:
            return self.password
        try:
            text = self.password_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"sasl.password.file {self.password_file}: cannot read it ({exc.strerror or exc}); "
                "mount the Secret holding the password there"
            ) from None
        if not text:
            raise ConfigError(f"sasl.password.file {self.password_file} is empty; write the password there")
        return Secret(text)

    def describe(self) -> str:
        """One line for logs and errors: protocol, mechanism and user, never a secret."""
        parts = [self.protocol]
        if self.uses_sasl:
            parts.append(f"{self.mechanism} as {self.username or '(token)'}")
        if self.certificate_location:
            parts.append(f"client certificate {self.certificate_location}")
        return ", ".join(parts)

    def ssl_context(self) -> ClientTLS | None:
        """The TLS context of a client (None without TLS); a bad CA or key file is a ConfigError. The
        client certificate is read again when its files change (:class:`~.tls.ClientTLS`)."""
        if not self.uses_tls:
            return None
        try:
            return ClientTLS.create(
                ca=self.ca_location,
                certificate=self.certificate_location,
                key=self.key_location,
                key_password=self.key_password.reveal() if self.key_password else None,
                check_hostname=self.check_hostname,
            )
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"cannot load the Kafka TLS files (ssl.ca.location {self.ca_location}, "
                f"ssl.certificate.location {self.certificate_location}, ssl.key.location "
                f"{self.key_location}): {exc}; check that they are PEM and the key password is right"
            ) from None


PLAINTEXT = KafkaSecurity()


def read_properties(path: Path) -> dict[str, Property]:
    """A Java properties file, read as Java's clients read it (:mod:`.properties`); an error names the
    line and the key, never a value (it may be a password)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"--kafka-config {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"--kafka-config {path}: line {line} is not UTF-8 text; save the file as UTF-8"
        ) from None
    try:
        return properties_dict(parse_properties(text))
    except PropertiesError as exc:
        raise ConfigError(f"--kafka-config {path}: {exc}") from None


def kafka_properties(config_file: Path | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The file's properties overridden by ``$KUBETAPE_KAFKA_*``; unknown names are refused. Values are
    trimmed, as Kafka's clients trim theirs."""
    where = f"--kafka-config {config_file}" if config_file else "the environment"
    props: dict[str, str] = {}
    for key, entry in (read_properties(config_file) if config_file else {}).items():
        name = _ALIASES.get(key, key)
        if name in _JAVA_ONLY:
            raise ConfigError(
                f"{where}: line {entry.line}: {key} is read only by Java clients; {_JAVA_ONLY[name]}"
            )
        if name not in _PROPERTIES:
            if not entry.has_separator:  # a stray word (a wrapped password?) is not quoted
                raise ConfigError(
                    f"{where}: line {entry.line} holds a single word, not a property kubetape reads; "
                    "write name=value"
                )
            raise ConfigError(
                f"{where}: line {entry.line}: unknown property {key!r}; "
                f"kubetape reads {', '.join(_PROPERTIES)}"
            )
        props[name] = entry.value.strip()
    for name in _PROPERTIES:
        from_env = environ.get(env_name(name))
        if from_env:
            props[name] = from_env
            other = _EITHER.get(name)
            if other and not environ.get(env_name(other)):
                props.pop(other, None)  # the environment's password wins over the file's, either way
    return props


def env_name(prop: str) -> str:
    return ENV_PREFIX + prop.upper().replace(".", "_")


def security_from_properties(props: Mapping[str, str], where: str) -> KafkaSecurity:
    """Check the properties as a whole and build the settings; every mistake names the property."""
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"{where}: security.protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    security = KafkaSecurity(
        protocol=protocol,
        mechanism=props["sasl.mechanism"].upper() if "sasl.mechanism" in props else None,
        username=props.get("sasl.username"),
        password=Secret(props["sasl.password"]) if "sasl.password" in props else None,
        password_file=_path(props, "sasl.password.file"),
        oauth_token_file=_path(props, "sasl.oauthbearer.token.file"),
        ca_location=_path(props, "ssl.ca.location"),
        certificate_location=_path(props, "ssl.certificate.location"),
        key_location=_path(props, "ssl.key.location"),
        key_password=Secret(props["ssl.key.password"]) if "ssl.key.password" in props else None,
        check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").lower() == "https",
    )
    _check(security, where)
    return security


def _path(props: Mapping[str, str], name: str) -> Path | None:
    return Path(props[name]).expanduser() if props.get(name) else None


def _check(s: KafkaSecurity, where: str) -> None:
    if s.uses_sasl:
        if s.mechanism not in MECHANISMS:
            raise ConfigError(
                f"{where}: sasl.mechanism {s.mechanism!r} is not supported; "
                f"use one of {', '.join(MECHANISMS)}"
            )
        if s.mechanism == "OAUTHBEARER":
            if s.oauth_token_file is None:
                raise ConfigError(f"{where}: sasl.mechanism OAUTHBEARER needs sasl.oauthbearer.token.file")
        elif not s.username or (s.password is None and s.password_file is None):
            raise ConfigError(
                f"{where}: sasl.mechanism {s.mechanism} needs sasl.username and sasl.password (the password "
                f"in the file or ${env_name('sasl.password')}, or in a file of its own named by "
                "sasl.password.file; never on the command line)"
            )
        elif s.password is not None and s.password_file is not None:
            raise ConfigError(
                f"{where}: both sasl.password and sasl.password.file are set; keep one (sasl.password.file "
                "is re-read at each connection, so a rotated password needs no restart)"
            )
    elif s.mechanism or s.username or s.password or s.password_file:
        raise ConfigError(
            f"{where}: SASL settings are given but security.protocol is {s.protocol}; "
            "use SASL_SSL (or SASL_PLAINTEXT)"
        )
    tls_files = {"ssl.ca.location": s.ca_location, "ssl.certificate.location": s.certificate_location}
    tls_files["ssl.key.location"] = s.key_location
    if not s.uses_tls and any(tls_files.values()):
        raise ConfigError(
            f"{where}: TLS files are given but security.protocol is {s.protocol}; use SSL or SASL_SSL"
        )
    if (s.certificate_location is None) != (s.key_location is None):
        raise ConfigError(f"{where}: mutual TLS needs both ssl.certificate.location and ssl.key.location")
    tls_files["sasl.oauthbearer.token.file"] = s.oauth_token_file
    tls_files["sasl.password.file"] = s.password_file
    for name, path in tls_files.items():
        if path is not None and not os.access(path, os.R_OK):
            raise ConfigError(f"{where}: {name} {path} does not exist or is not readable")


def load_security(config_file: Path | None, environ: Mapping[str, str]) -> tuple[KafkaSecurity, str | None]:
    """The security settings and the file's or environment's ``bootstrap.servers`` (None if unset)."""
    props = kafka_properties(config_file, environ)
    where = f"--kafka-config {config_file}" if config_file else "$KUBETAPE_KAFKA_*"
    return security_from_properties(props, where), props.get(BOOTSTRAP_PROPERTY)
