"""Java's key and trust stores read into the PEM text librdkafka takes.

Spark's Kafka connector hands Kafka's Java client a trust store (``kafka.ssl.truststore.location``,
``.password``, ``.type``) and, for mutual TLS, a key store (``kafka.ssl.keystore.*``,
``kafka.ssl.key.password``): files of Java's ``JKS`` or ``PKCS12`` formats, or ``PEM``.
librdkafka reads PEM (``ssl.ca.pem``, ``ssl.certificate.pem``, ``ssl.key.pem``). This module
reads the three formats, checks the passwords as Java does, and returns the certificates and the
private key as PEM text, in memory (nothing is written to disk). The key stays encrypted, with
the key's own password, for librdkafka's ``ssl.key.password``.

The format is read from the file's first bytes (Java 9 and later load a JKS store given as
``PKCS12`` and the reverse, ``keystore.type.compat``): ``JKS`` (magic ``FEEDFEED``: trusted
certificate entries, and private keys under Sun's ``KeyProtector``, checked with the SHA-1 digests
the format keeps), ``PKCS12`` (a DER sequence; read with the ``cryptography`` package, Java's
PBES2/AES certificate and key protection included), ``PEM`` (``-----BEGIN``). A ``JCEKS`` store,
and the ``BKS`` and other types, are refused naming the option, with the ``keytool`` command that
converts them.

Every error is a :class:`KafkaTlsError` naming the option (``kafka.ssl.truststore.location``,
``kafka.ssl.keystore.password``, ...), the file and the cause; no message quotes a password.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import struct
from dataclasses import dataclass

from dataflow_kafka.errors import KafkaTlsError

__all__ = ["StoreFormat", "store_format", "read_truststore", "read_keystore", "KeyPair", "pem_certificates"]

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"
_KEY_PROTECTOR_OID = bytes.fromhex("060a2b060104012a02110101")   # 1.3.6.1.4.1.42.2.17.1.1, Sun's KeyProtector
_TRUSTED_CERTIFICATE, _PRIVATE_KEY = 2, 1
_PEM_KEY = re.compile(rb"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.+?-----END \1PRIVATE KEY-----", re.S)
_CONVERT = ("keytool -importkeystore -srckeystore {path} -destkeystore store.p12 -deststoretype PKCS12 "
            "(then give store.p12)")


class StoreFormat:
    """The store formats this module reads (the values of ``kafka.ssl.*store.type``)."""

    JKS, PKCS12, PEM = "JKS", "PKCS12", "PEM"
    ALL = (JKS, PKCS12, PEM)


@dataclass(frozen=True)
class KeyPair:
    """A key store's client certificate chain and private key, as PEM text; the key is encrypted
    with ``password`` (None: not encrypted)."""

    certificates: str
    key: str
    password: str | None


def _describe(option: str, path: str, fmt: str | None = None) -> str:
    return f"option 'kafka.{option}' ({path!r}{', ' + fmt if fmt else ''})"


def store_format(data: bytes) -> str | None:
    """The format of a store's bytes: ``JKS``, ``PKCS12``, ``PEM``, ``JCEKS``, or None (unknown)."""
    if data.startswith(_JKS_MAGIC):
        return StoreFormat.JKS
    if data.startswith(_JCEKS_MAGIC):
        return "JCEKS"
    if b"-----BEGIN " in data[:64 * 1024]:
        return StoreFormat.PEM
    if data[:1] == b"\x30":     # a DER SEQUENCE: PKCS#12's PFX
        return StoreFormat.PKCS12
    return None


def _read(option: str, path: str, declared: str | None) -> tuple[bytes, str]:
    """The bytes and format of the store at ``path`` (option ``option``, e.g. ``ssl.truststore.location``)."""
    if declared is not None and declared.upper() not in StoreFormat.ALL:
        type_option = option.replace(".location", ".type")
        raise KafkaTlsError(f"option 'kafka.{type_option}' is {declared!r}: supported store types are "
                            f"{', '.join(StoreFormat.ALL)} (convert other stores: {_CONVERT.format(path=path)})")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise KafkaTlsError(f"{_describe(option, path)}: no such file on {os.uname().nodename}") from None
    except IsADirectoryError:
        raise KafkaTlsError(f"{_describe(option, path)}: is a directory, not a store file") from None
    except OSError as e:
        raise KafkaTlsError(f"{_describe(option, path)}: cannot be read: {e.strerror}") from None
    fmt = store_format(data)
    if fmt == "JCEKS":
        raise KafkaTlsError(f"{_describe(option, path, 'JCEKS')}: JCEKS stores are not supported; convert it: "
                            + _CONVERT.format(path=path))
    if fmt is None:
        raise KafkaTlsError(f"{_describe(option, path)}: not a JKS, PKCS12 or PEM store (type "
                            f"{declared or 'not given'}); convert it: {_CONVERT.format(path=path)}")
    return data, fmt


def _version(path: str) -> tuple:
    """What tells a file's versions apart (a store replaced on disk is read again)."""
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return st.st_mtime_ns, st.st_size, st.st_ino


def read_truststore(path: str, password: str | None, declared_type: str | None = None) -> str:
    """PEM text of the certificates ``path`` trusts (a JKS store's trusted certificate entries,
    every certificate of a PKCS12 store, the certificates of a PEM file), with a leading line
    saying where they came from (PEM's explanatory text, which readers skip). ``password``
    checks a JKS store's integrity when given (Java does the same) and opens a PKCS12 store."""
    return _truststore(path, _version(path), password, declared_type)


@functools.lru_cache(maxsize=32)
def _truststore(path: str, _version: tuple, password: str | None, declared_type: str | None) -> str:
    option = "ssl.truststore.location"
    data, fmt = _read(option, path, declared_type)
    if fmt == StoreFormat.JKS:
        store = _Jks(data, path, "ssl.truststore.password", password)
        ders = store.trusted or [chain[0] for _, chain in store.keys]
    elif fmt == StoreFormat.PKCS12:
        loaded = _pkcs12(data, path, "ssl.truststore", password)
        ders = [c.certificate.public_bytes(_der()) for c in ([loaded.cert] if loaded.cert else []) + list(
            loaded.additional_certs)]
    else:
        ders = [c.public_bytes(_der()) for c in _pem_certificates(data, option, path)]
    if not ders:
        raise KafkaTlsError(f"{_describe(option, path, fmt)}: holds no certificate to trust")
    origin = f"dataflow-kafka: from kafka.ssl.truststore.location={path!r} ({fmt})\n"
    return origin + "".join(_pem(der) for der in ders)


def read_keystore(path: str, password: str | None, key_password: str | None = None,
                  declared_type: str | None = None) -> KeyPair:
    """The client certificate chain and private key of the key store ``path``: the one private
    key entry of a JKS or PKCS12 store (opened with ``key_password``, else ``password``, as
    Kafka's Java client), or the key and certificates of a PEM file. The key comes back encrypted
    with that password."""
    return _keystore(path, _version(path), password, key_password, declared_type)


@functools.lru_cache(maxsize=32)
def _keystore(path: str, _version: tuple, password: str | None, key_password: str | None,
              declared_type: str | None) -> KeyPair:
    from cryptography.hazmat.primitives import serialization

    option = "ssl.keystore.location"
    data, fmt = _read(option, path, declared_type)
    secret = key_password if key_password is not None else password
    if fmt == StoreFormat.JKS:
        store = _Jks(data, path, "ssl.keystore.password", password)
        if len(store.keys) != 1:
            raise KafkaTlsError(f"{_describe(option, path, fmt)}: holds {len(store.keys)} private keys; the client "
                                "needs exactly one (its certificate and key)")
        protected, chain = store.keys[0]
        private_key = serialization.load_der_private_key(
            _unprotect(protected, secret, path, "ssl.key.password" if key_password is not None
                       else "ssl.keystore.password"), None)
        ders = chain
    elif fmt == StoreFormat.PKCS12:
        loaded = _pkcs12(data, path, "ssl.keystore", password)
        if loaded.key is None or loaded.cert is None:
            raise KafkaTlsError(f"{_describe(option, path, fmt)}: holds no private key with its certificate")
        private_key = loaded.key
        ders = [c.certificate.public_bytes(_der()) for c in [loaded.cert, *loaded.additional_certs]]
    else:
        private_key = _pem_key(data, path, secret)
        ders = [c.public_bytes(_der()) for c in _pem_certificates(data, option, path)]
    encryption = (serialization.BestAvailableEncryption(secret.encode()) if secret
                  else serialization.NoEncryption())
    key_pem = private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    return KeyPair("".join(_pem(der) for der in ders), key_pem.decode(), secret or None)


def pem_certificates(text: str, option: str) -> list:
    """The certificates of PEM ``text`` given inline in option ``option`` (``cryptography`` objects)."""
    return _pem_certificates(text.encode(), option, None)


def _pem_certificates(data: bytes, option: str, path: str | None) -> list:
    from cryptography import x509

    where = f"option 'kafka.{option}'" + (f" ({path!r})" if path else "")
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as e:
        raise KafkaTlsError(f"{where}: no readable PEM certificate ({e})") from None
    return certs


def _pem_key(data: bytes, path: str, password: str | None):
    from cryptography.hazmat.primitives import serialization

    block = _PEM_KEY.search(data)
    if block is None:
        raise KafkaTlsError(f"{_describe('ssl.keystore.location', path, 'PEM')}: holds no private key")
    try:
        return serialization.load_pem_private_key(block.group(0), password.encode() if password else None)
    except TypeError:
        raise KafkaTlsError(f"{_describe('ssl.keystore.location', path, 'PEM')}: the private key is encrypted and no "
                            "password is set (kafka.ssl.key.password)") from None
    except ValueError:
        raise KafkaTlsError(f"option 'kafka.ssl.key.password' does not decrypt the private key of {path!r} "
                            "(PEM): a wrong password, or a damaged key") from None


def _der():
    from cryptography.hazmat.primitives.serialization import Encoding

    return Encoding.DER


def _pem(der: bytes) -> str:
    import base64

    body = base64.encodebytes(der).decode().replace("\n", "")
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return "-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----\n"


def _pkcs12(data: bytes, path: str, prefix: str, password: str | None):
    from cryptography.hazmat.primitives.serialization import pkcs12

    option = f"{prefix}.location"
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password is not None else None)
    except ValueError:
        if password is None:
            raise KafkaTlsError(f"{_describe(option, path, 'PKCS12')}: cannot be opened without a password; set "
                                f"option 'kafka.{prefix}.password'") from None
        raise KafkaTlsError(f"option 'kafka.{prefix}.password' does not open {path!r} (PKCS12): a wrong password, or "
                            "a damaged file") from None


class _Damaged(KafkaTlsError):
    """A JKS store's bytes do not follow the format (reported by :class:`_Jks` naming the option)."""

    condition = KafkaTlsError.condition


class _Jks:
    """The entries of a JKS store: ``trusted`` (DER certificates) and ``keys`` ((protected key,
    DER chain) per private key entry). With a password, the store's digest is checked first."""

    def __init__(self, data: bytes, path: str, password_option: str, password: str | None) -> None:
        option = password_option.replace(".password", ".location")
        self.trusted: list[bytes] = []
        self.keys: list[tuple[bytes, list[bytes]]] = []
        try:
            end = self._parse(data)
        except (struct.error, IndexError, _Damaged) as e:
            raise KafkaTlsError(f"{_describe(option, path, 'JKS')}: a damaged JKS store ({e})") from None
        if password is not None:
            digest = hashlib.sha1(_java_chars(password) + b"Mighty Aphrodite" + data[:end]).digest()
            if digest != data[end:end + 20]:
                raise KafkaTlsError(f"option 'kafka.{password_option}' does not open {path!r} (JKS): the store's "
                                    "integrity check failed (a wrong password, or a damaged file)")

    def _parse(self, data: bytes) -> int:
        _, version, count = struct.unpack_from(">4sII", data, 0)
        if version not in (1, 2):
            raise _Damaged(f"version {version}")
        pos = 12

        def u32() -> int:
            nonlocal pos
            (n,) = struct.unpack_from(">I", data, pos)
            pos += 4
            return n

        def utf() -> str:
            nonlocal pos
            (n,) = struct.unpack_from(">H", data, pos)
            pos += 2 + n
            return data[pos - n:pos].decode("utf-8", "replace")

        def blob() -> bytes:
            nonlocal pos
            n = u32()
            pos += n
            if pos > len(data):
                raise _Damaged("truncated")
            return data[pos - n:pos]

        def certificate() -> bytes:
            if version == 2:
                kind = utf()
                if kind != "X.509":
                    raise _Damaged(f"certificate type {kind!r}")
            return blob()

        for _ in range(count):
            tag = u32()
            utf()                         # alias
            pos += 8                      # creation time
            if tag == _TRUSTED_CERTIFICATE:
                self.trusted.append(certificate())
            elif tag == _PRIVATE_KEY:
                protected = blob()
                self.keys.append((protected, [certificate() for _ in range(u32())]))
            else:
                raise _Damaged(f"entry type {tag}")
        return pos


def _java_chars(password: str) -> bytes:
    """A password as Java's JKS digests see it: two bytes per ``char``, big-endian."""
    return password.encode("utf-16-be")


def _unprotect(protected: bytes, password: str | None, path: str, option: str) -> bytes:
    """The PKCS#8 key of a JKS private key entry: an ``EncryptedPrivateKeyInfo`` whose data is
    salt (20 bytes), the key XOR a SHA-1 key stream of password and salt, and SHA-1(password,
    key) to check the password (Sun's ``KeyProtector``)."""
    if password is None:
        raise KafkaTlsError(f"option 'kafka.ssl.keystore.location' ({path!r}, JKS): the private key needs a password; "
                            "set kafka.ssl.key.password (or kafka.ssl.keystore.password)")
    algorithm, data = _encrypted_private_key_info(protected)
    if not algorithm.startswith(_KEY_PROTECTOR_OID):
        raise KafkaTlsError(f"option 'kafka.ssl.keystore.location' ({path!r}, JKS): the private key is protected with "
                            f"an algorithm this reader does not know; convert the store: {_CONVERT.format(path=path)}")
    salt, encrypted, check = data[:20], data[20:-20], data[-20:]
    secret = _java_chars(password)
    stream, block = bytearray(), salt
    while len(stream) < len(encrypted):
        block = hashlib.sha1(secret + block).digest()
        stream += block
    n = len(encrypted)
    plain = (int.from_bytes(encrypted, "big") ^ int.from_bytes(bytes(stream[:n]), "big")).to_bytes(n, "big")
    if hashlib.sha1(secret + plain).digest() != check:
        raise KafkaTlsError(f"option 'kafka.{option}' does not decrypt the private key in {path!r} (JKS): a wrong "
                            "password")
    return plain


def _encrypted_private_key_info(der: bytes) -> tuple[bytes, bytes]:
    """(the algorithm identifier's content, the encrypted data) of a DER ``EncryptedPrivateKeyInfo``."""
    def tlv(pos: int) -> tuple[int, int, int]:
        tag, first = der[pos], der[pos + 1]
        pos += 2
        if first & 0x80:
            size = int.from_bytes(der[pos:pos + (first & 0x7F)], "big")
            pos += first & 0x7F
        else:
            size = first
        return tag, pos, pos + size

    _, inside, _ = tlv(0)                       # SEQUENCE
    _, alg_start, alg_end = tlv(inside)         # AlgorithmIdentifier
    tag, data_start, data_end = tlv(alg_end)    # OCTET STRING
    if tag != 0x04:
        raise KafkaTlsError("a JKS private key entry is not an EncryptedPrivateKeyInfo")
    return der[alg_start:alg_end], der[data_start:data_end]
