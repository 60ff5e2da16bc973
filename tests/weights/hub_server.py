"""A loopback stand-in for the Hugging Face Hub: what `huggingface_hub` 2.x calls, on 127.0.0.1.

`HubServer` serves repos the tests write (`add_commit(repo_id, files, refs)`), answering:

- `HEAD` / `GET /{repo_id}/resolve/{revision}/{path}`: `X-Repo-Commit`, `ETag`,
  `Content-Length`; `GET` honours `Range: bytes=N-` (206, `Content-Range`: resumed downloads),
  and a file in `drop_once` is cut off halfway once (a dropped connection, which the client
  resumes);
- `GET /api/models/{repo_id}/revision/{revision}`: `{"id", "sha", "siblings"}`
  (`HfApi.repo_info`, which `snapshot_download` calls);
- `GET /api/models/{repo_id}/tree/{revision}?recursive=true`: `[{"type", "path", "size",
  "oid"}]` (`HfApi.list_repo_tree`);
- a 404 with the Hub's `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`),
  which `huggingface_hub.utils.hf_raise_for_status` turns into its errors.

Every request is logged (`requests`: method, path, Range header) for the tests to check what
the client asked for (e.g. never a pickle, nothing at all offline). Point the client at it with
`HF_ENDPOINT=server.url`, set before `huggingface_hub` is first imported.
"""

import hashlib
import http.server
import json
import threading
import urllib.parse


class HubServer:
    """An HTTP server thread on 127.0.0.1 serving in-memory Hub repos."""

    def __init__(self):
        self.repos = {}  # repo_id -> {"refs": {name: sha}, "commits": {sha: {path: bytes}}}
        self.requests = []
        # "{repo_id}/{filename}" whose next full GET stops halfway (a dropped connection).
        self.drop_once = set()
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802 - http.server's name
                server._answer(self, head=True)

            def do_GET(self):  # noqa: N802
                server._answer(self, head=False)

            def log_message(self, *args):  # quiet
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()

    def add_commit(self, repo_id, files, refs=("main",)):
        """Adds a commit of `files` ({path: bytes}) to a repo; `refs` (branches, tags) point at
        it. Returns its 40-hex sha."""
        digest = hashlib.sha1(repo_id.encode())
        for path in sorted(files):
            digest.update(path.encode() + hashlib.sha256(files[path]).digest())
        sha = digest.hexdigest()
        repo = self.repos.setdefault(repo_id, {"refs": {}, "commits": {}})
        repo["commits"][sha] = dict(files)
        for ref in refs:
            repo["refs"][ref] = sha
        return sha

    def requested(self, fragment):
        """The logged requests whose path contains `fragment`."""
        with self._lock:
            return [r for r in self.requests if fragment in r[1]]

    # --- the routes ---------------------------------------------------------------------------

    def _answer(self, handler, head):
        parsed = urllib.parse.urlsplit(handler.path)
        path = urllib.parse.unquote(parsed.path)
        with self._lock:
            self.requests.append((handler.command, path, handler.headers.get("Range")))
        if path.startswith("/api/models/"):
            return self._api(handler, path[len("/api/models/") :], head)
        parts = path.lstrip("/").split("/")
        if len(parts) >= 5 and parts[2] == "resolve":
            # /{org}/{name}/resolve/{revision}/{file}: a revision with '/' is URL-quoted
            repo_id, rest = "/".join(parts[:2]), parse_quoted_revision(parsed.path)
            return self._resolve(handler, repo_id, *rest, head=head)
        return self._error(handler, 404, "RepoNotFound", f"no route {path}")

    def _commit(self, handler, repo_id, revision):
        repo = self.repos.get(repo_id)
        if repo is None:
            self._error(handler, 404, "RepoNotFound", f"Repository {repo_id} not found")
            return None, None
        sha = repo["refs"].get(revision, revision if revision in repo["commits"] else None)
        if sha is None:
            self._error(handler, 404, "RevisionNotFound", f"Revision {revision} not found")
            return None, None
        return sha, repo["commits"][sha]

    def _resolve(self, handler, repo_id, revision, filename, head):
        sha, files = self._commit(handler, repo_id, revision)
        if sha is None:
            return None
        data = files.get(filename)
        if data is None:
            return self._error(handler, 404, "EntryNotFound", f"{filename} not in {repo_id}")
        start, status = 0, 200
        ranged = handler.headers.get("Range")
        if ranged and not head and ranged.startswith("bytes=") and ranged.endswith("-"):
            start, status = int(ranged[len("bytes=") : -1]), 206
        body = data[start:]
        key = f"{repo_id}/{filename}"
        if not head and status == 200 and key in self.drop_once:
            self.drop_once.discard(key)
            body = body[: len(body) // 2]  # Content-Length says all of it: the client resumes
            handler.close_connection = True
        handler.send_response(status)
        handler.send_header("X-Repo-Commit", sha)
        handler.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
        handler.send_header("Content-Length", str(len(data) if head else len(data) - start))
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.end_headers()
        if not head:
            handler.wfile.write(body)
        return None

    def _api(self, handler, rest, head):
        parts = rest.split("/")
        repo_id, kind = "/".join(parts[:2]), parts[2] if len(parts) > 2 else "revision"
        revision = urllib.parse.unquote("/".join(parts[3:])) or "main"
        sha, files = self._commit(handler, repo_id, revision)
        if sha is None:
            return None
        if kind == "revision":
            body = {"id": repo_id, "sha": sha, "siblings": [{"rfilename": p} for p in files]}
        elif kind == "tree":
            body = [
                {"type": "file", "path": p, "size": len(d), "oid": hashlib.sha1(d).hexdigest()}
                for p, d in sorted(files.items())
            ]
        else:
            return self._error(handler, 404, "RepoNotFound", f"no API route {kind}")
        return self._json(handler, body, head)

    @staticmethod
    def _json(handler, body, head):
        data = json.dumps(body).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if not head:
            handler.wfile.write(data)

    @staticmethod
    def _error(handler, status, code, message):
        data = json.dumps({"error": message}).encode()
        handler.send_response(status)
        handler.send_header("X-Error-Code", code)
        handler.send_header("X-Error-Message", message)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)


def parse_quoted_revision(raw_path):
    """`(revision, filename)` of a raw `/{org}/{name}/resolve/{revision}/{file}` path, where a
    revision with '/' (`refs/pr/1`) arrives URL-quoted as one segment."""
    segments = raw_path.lstrip("/").split("/")
    revision = urllib.parse.unquote(segments[3])
    filename = urllib.parse.unquote("/".join(segments[4:]))
    return revision, filename
