"""A thin Python client for the latpred REST service, on the standard library alone.

    from service.client import LatpredClient
    api = LatpredClient("http://127.0.0.1:8000", api_key=None)
    api.predict(model="resnet50", device="h200", batch=8, precision="bf16", mode="eager")
    api.upload_host(json.load(open("host.json")))  # a profile from 'latpred host probe'
    api.predict(model="resnet50", batch=1, mode="eager", host="h200-a1b2c3d4e5")
    api.predict_batch([{"model": "resnet50"}, {"graph_id": gid}], [{"batch": 1}, {"batch": 32}])
    api.latency(model="resnet50", batch=[1, 8, 32], format="csv")

Errors come back as :class:`LatpredError` carrying the problem object (status, detail, field).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any


class LatpredError(Exception):
    """A problem+json answer (or a transport failure with status 0)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        field = f" [{problem['field']}]" if problem.get("field") else ""
        super().__init__(f"{status}{field}: {problem.get('detail') or problem.get('title') or 'error'}")


class LatpredClient:
    """Calls one latpred server; every method returns the decoded answer."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    # ------------------------------------------------------------------ transport
    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: bytes | None = None,
                content_type: str | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """Send one request; returns (status, decoded body); raises LatpredError on 4xx/5xx."""
        url = self.base_url + path
        if query:
            items = {k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v
                     for k, v in query.items() if v is not None}
            url += "?" + urllib.parse.urlencode(items)
        req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
        if content_type:
            req.add_header("Content-Type", content_type)
        if self.api_key:
            req.add_header("X-API-Key", self.api_key)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, _decode(resp.headers.get("Content-Type", ""), resp.read())
        except urllib.error.HTTPError as err:
            data = _decode(err.headers.get("Content-Type", ""), err.read())
            if err.code == 304:
                return 304, None
            raise LatpredError(err.code, data if isinstance(data, dict) else {"detail": str(data)}) from None
        except urllib.error.URLError as err:
            raise LatpredError(0, {"detail": f"cannot reach {self.base_url}: {err.reason}"}) from None

    def _json(self, method: str, path: str, payload: Any) -> Any:
        return self.request(method, path, body=json.dumps(payload).encode(), content_type="application/json")[1]

    def _multipart(self, path: str, fields: dict[str, Any], file_field: str, data: bytes, filename: str) -> Any:
        boundary = uuid.uuid4().hex
        parts = []
        for key, value in fields.items():
            if value is None:
                continue
            value = str(value).lower() if isinstance(value, bool) else str(value)
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode())
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="{filename}"\r\n'
                     f"Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
        parts.append(f"--{boundary}--\r\n".encode())
        return self.request("POST", path, body=b"".join(parts),
                            content_type=f"multipart/form-data; boundary={boundary}")[1]

    # ------------------------------------------------------------------ endpoints
    def predict(self, model: str | None = None, *, graph: dict[str, Any] | None = None, graph_id: str | None = None,
                onnx: bytes | str | Path | None = None, device: str | None = None, batch: int | None = None,
                precision: str = "fp16", mode: str = "cudagraph", layers: bool = True,
                dims: dict[str, int] | None = None, host: str | None = None) -> dict[str, Any]:
        """One graph (zoo name, JSON IR, stored id, or ONNX bytes/path) on one variant; ``dims``
        sets an ONNX model's symbolic dims by name (``{"sequence": 256}``); ``host`` names the host
        profile an eager prediction is for (default: the bundle's)."""
        if onnx is not None:
            data = onnx if isinstance(onnx, bytes) else Path(onnx).read_bytes()
            return self._multipart("/v1/predict", {"device": device, "batch": batch, "precision": precision,
                                                   "mode": mode, "layers": layers, "host": host,
                                                   "dims": json.dumps(dims) if dims else None},
                                   "onnx", data, "model.onnx")
        payload: dict[str, Any] = {"precision": precision, "mode": mode, "layers": layers}
        for key, value in (("model", model), ("graph", graph), ("graph_id", graph_id), ("device", device),
                           ("batch", batch), ("host", host)):
            if value is not None:
                payload[key] = value
        return self._json("POST", "/v1/predict", payload)

    def predict_batch(self, graphs: list[dict[str, Any] | str], variants: list[dict[str, Any]] | None = None,
                      layers: bool = False) -> dict[str, Any]:
        """Many graphs x many variants; a str in ``graphs`` is a zoo name."""
        sources = [{"model": g} if isinstance(g, str) else g for g in graphs]
        return self._json("POST", "/v1/predict/batch", {"graphs": sources, "variants": variants or [{}],
                                                        "layers": layers})

    def latency(self, model: str | list[str] | None = None, *, graph: str | list[str] | None = None,
                device: str | list[str] | None = None, batch: int | list[int] | None = None,
                precision: str | list[str] | None = None, mode: str | list[str] | None = None,
                host: str | list[str] | None = None, format: str = "json") -> Any:
        """The spreadsheet endpoint: a list (json), CSV text (csv) or one float (txt)."""
        _, data = self.request("GET", "/v1/latency", query={"model": model, "graph": graph, "device": device,
                                                            "batch": batch, "precision": precision, "mode": mode,
                                                            "host": host, "format": format})
        return float(data) if format == "txt" else data

    def upload_graph(self, graph: dict[str, Any] | bytes | str | Path, *, name: str | None = None,
                     batch: int | None = None, dims: dict[str, int] | None = None) -> dict[str, Any]:
        """Store a graph: a JSON IR dict, or ONNX bytes or an .onnx/.json path (``dims`` sets its
        symbolic dims); returns its id."""
        if isinstance(graph, (str, Path)):
            path = Path(graph)
            if path.suffix.lower() == ".json":
                graph = json.loads(path.read_text())
            else:
                graph = path.read_bytes()
        if isinstance(graph, bytes):
            return self._multipart("/v1/graphs", {"name": name, "batch": batch,
                                                  "dims": json.dumps(dims) if dims else None},
                                   "onnx", graph, "model.onnx")
        return self._json("POST", "/v1/graphs", graph)

    def graph(self, graph_id: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/graphs/{graph_id}")[1]

    def upload_host(self, profile: dict[str, Any] | str | Path) -> dict[str, Any]:
        """Store a host profile (a dict, or the path of the JSON ``latpred host probe`` wrote);
        predictions then name it by ``host``. A different profile under a known id is refused (409)."""
        if not isinstance(profile, dict):
            profile = json.loads(Path(profile).read_text())
        return self._json("POST", "/v1/hosts", profile)

    def hosts(self) -> list[dict[str, Any]]:
        """The host profiles the bundles carry and the stored ones."""
        return self.request("GET", "/v1/hosts")[1]["hosts"]

    def host(self, host_id: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/hosts/{urllib.parse.quote(host_id, safe='')}")[1]

    def devices(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/devices")[1]["devices"]

    def models(self) -> dict[str, Any]:
        return self.request("GET", "/v1/models")[1]

    def reload(self) -> dict[str, Any]:
        return self.request("POST", "/v1/models/reload")[1]

    def ready(self) -> bool:
        """True once the server has loaded its model bundles."""
        try:
            return self.request("GET", "/readyz")[0] == 200
        except LatpredError:
            return False


def _decode(content_type: str, data: bytes) -> Any:
    if "json" in content_type:
        return json.loads(data) if data else None
    return data.decode("utf-8", errors="replace")
