"""A small Kubernetes REST client: kubeconfig or in-cluster credentials, JSON requests, watch streams.

The probe makes five kinds of call. The generated ``kubernetes`` client would cost a probe about 30 MiB
of resident memory just to construct (the budget is 60 MB for the whole probe), so the probe speaks HTTP
itself over urllib3. Errors come out as ``ApiError`` with the HTTP status (0: the server was not reached).
Credentials are the in-cluster service account, or a kubeconfig with a token, token file or client
certificate; a kubeconfig user with an exec plugin or auth provider is refused at start with a message
saying so (the probe runs no credential plugins).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3
import yaml

from gputopo_probe.errors import ApiError

__all__ = ["ApiClient", "Credentials", "load_credentials"]

_SA = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass
class Credentials:
    server: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    insecure: bool = False
    _temporaries: list[str] = field(default_factory=list, repr=False)


def _materialise(data: str, creds: Credentials) -> str:
    """``*-data`` fields are base64 PEM; ssl wants files."""
    fd, path = tempfile.mkstemp(prefix="gputopo-probe-", suffix=".pem")
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(data))
    creds._temporaries.append(path)
    return path


def _from_kubeconfig(path: Path) -> Credentials:
    doc = yaml.safe_load(path.read_text()) or {}
    context_name = str(doc.get("current-context", ""))
    contexts: dict[str, dict[str, Any]] = {c["name"]: c.get("context", {}) for c in doc.get("contexts", [])}
    context: dict[str, Any] = contexts.get(context_name) or next(iter(contexts.values()), {})
    cluster: dict[str, Any] = next(
        (c.get("cluster", {}) for c in doc.get("clusters", []) if c["name"] == context.get("cluster")), {}
    )
    user: dict[str, Any] = next(
        (u.get("user", {}) for u in doc.get("users", []) if u["name"] == context.get("user")), {}
    )
    if not cluster.get("server"):
        raise ApiError(f"kubeconfig {path}", 0, "no server for the current context")
    if user.get("exec") or user.get("auth-provider"):
        raise ApiError(
            f"kubeconfig {path}",
            0,
            f"user {context.get('user')!r} gets its credentials from an exec plugin or auth provider, which the "
            "probe does not run (exec credentials are not supported); give it a token, tokenFile or client "
            "certificate, or run the probe in the cluster with its service account",
        )

    def resolve(value: str | None) -> str | None:
        return str((path.parent / value).resolve()) if value and not os.path.isabs(value) else value

    creds = Credentials(
        server=str(cluster["server"]).rstrip("/"), insecure=bool(cluster.get("insecure-skip-tls-verify"))
    )
    creds.ca_file = resolve(cluster.get("certificate-authority"))
    if cluster.get("certificate-authority-data"):
        creds.ca_file = _materialise(cluster["certificate-authority-data"], creds)
    creds.cert_file = resolve(user.get("client-certificate"))
    if user.get("client-certificate-data"):
        creds.cert_file = _materialise(user["client-certificate-data"], creds)
    creds.key_file = resolve(user.get("client-key"))
    if user.get("client-key-data"):
        creds.key_file = _materialise(user["client-key-data"], creds)
    creds.token = user.get("token")
    if user.get("tokenFile"):
        creds.token = Path(resolve(user["tokenFile"]) or "").read_text().strip()
    return creds


def load_credentials(kubeconfig: str | Path | None = None) -> Credentials:
    """``kubeconfig`` if given, else the in-cluster service account, else ``$KUBECONFIG`` or ~/.kube/config."""
    try:
        if kubeconfig:
            return _from_kubeconfig(Path(kubeconfig))
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if host:
            server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
            return Credentials(server, ca_file=str(_SA / "ca.crt"), token=(_SA / "token").read_text().strip())
        env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        return _from_kubeconfig(Path(env) if env else Path.home() / ".kube" / "config")
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as error:
        raise ApiError("load kubeconfig", 0, str(error)) from error


class ApiClient:
    def __init__(self, creds: Credentials, *, timeout_s: float = 10.0, pool_size: int = 8) -> None:
        self.creds = creds
        self.headers = {"Accept": "application/json", "User-Agent": "gputopo-probe"}
        if creds.token:
            self.headers["Authorization"] = f"Bearer {creds.token}"
        kwargs: dict[str, Any] = {"maxsize": pool_size, "timeout": urllib3.Timeout(connect=5.0, read=timeout_s)}
        if creds.server.startswith("https"):
            context = ssl.create_default_context(cafile=creds.ca_file)
            if creds.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if creds.cert_file:
                context.load_cert_chain(creds.cert_file, creds.key_file)
            kwargs["ssl_context"] = context
        self.http = urllib3.PoolManager(retries=False, **kwargs)

    def _url(self, path: str, params: dict[str, Any] | None) -> str:
        query = f"?{urlencode(params)}" if params else ""
        return f"{self.creds.server}{path}{query}"

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        params: dict[str, Any] | None = None,
    ) -> Any:
        what = f"{method} {path}"
        headers = dict(self.headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        try:
            response = self.http.request(method, self._url(path, params), body=data, headers=headers)
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(what, 0, str(error)) from error
        if response.status >= 400:
            raise ApiError(what, response.status, _reason(response.data))
        try:
            return json.loads(response.data) if response.data else None
        except ValueError as error:
            raise ApiError(what, response.status, f"response is not JSON: {error}") from error

    def watch(self, path: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Events of a watch (``{"type": …, "object": …}``) until the server ends it."""
        what = f"WATCH {path}"
        timeout = float(params.get("timeoutSeconds", 300)) + 30
        try:
            response = self.http.request(
                "GET",
                self._url(path, {**params, "watch": "1"}),
                headers=self.headers,
                preload_content=False,
                timeout=urllib3.Timeout(connect=5.0, read=timeout),
            )
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(what, 0, str(error)) from error
        try:
            if response.status >= 400:
                raise ApiError(what, response.status, _reason(response.read()))
            buffer = b""
            for chunk in response.stream(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(what, 0, str(error)) from error
        finally:
            response.release_conn()

    def close(self) -> None:
        self.http.clear()
        for path in self.creds._temporaries:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _reason(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message", ""))[:300]
    except (ValueError, AttributeError):
        return data[:300].decode("utf-8", "replace")
