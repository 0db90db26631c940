"""The PEP 517 build backend of the sluice Python package (pyproject.toml
says why it is here instead of setuptools). Standard library only.

It writes three things:
  wheel     sluice/*.py, sluice/_installed.py (the version) and the
            .dist-info (METADATA, WHEEL, RECORD, top_level.txt);
  editable  a .pth and a small import hook that load `sluice` from this
            folder, so edits take effect without reinstalling;
  sdist     pyproject.toml, backend/, sluice/, README.md and PKG-INFO.

The version has one source: SLUICE_VERSION in
common/include/sluice/common.h of the source tree this folder (python/)
belongs to; an sdist carries it in its PKG-INFO. The metadata comes from
the [project] table of pyproject.toml.
"""
import base64
import calendar
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # python/
HEADER = os.path.join(HERE, os.pardir, "common", "include", "sluice", "common.h")
PACKAGE = "sluice"
# Keys of [project] this backend turns into metadata; any other is refused
# rather than dropped.
KNOWN_KEYS = {"name", "version", "dynamic", "description", "readme", "requires-python",
              "dependencies", "optional-dependencies"}


class BuildError(Exception):
    pass


# ---- the inputs ---------------------------------------------------------

def _parse_toml_subset(text, path):
    """For Pythons before 3.11 (no tomllib): the subset of TOML that
    pyproject.toml is written in — [table] headers, `key = value` on one
    line, values that are strings or arrays of strings, # comments."""
    import ast
    doc, table = {}, None
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.match(r"^\[([A-Za-z0-9_.-]+)\]$", s)
        if m:
            table = doc
            for part in m.group(1).split("."):
                table = table.setdefault(part, {})
            continue
        m = re.match(r'^([A-Za-z0-9_-]+|"[^"]*")\s*=\s*(.+)$', s)
        if not m or table is None:
            raise BuildError("%s:%d: not understood without tomllib: %s" % (path, n, s))
        key = m.group(1).strip('"')
        try:
            value = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            raise BuildError("%s:%d: not understood without tomllib: %s" % (path, n, s))
        table[key] = value
    return doc


def read_pyproject(root=HERE):
    path = os.path.join(root, "pyproject.toml")
    with open(path, "rb") as f:
        data = f.read()
    try:
        import tomllib
    except ImportError:
        return _parse_toml_subset(data.decode("utf-8"), path)
    return tomllib.loads(data.decode("utf-8"))


def read_version(root=HERE):
    """SLUICE_VERSION of the source tree, or an sdist's PKG-INFO Version."""
    header = os.path.join(root, os.pardir, "common", "include", "sluice", "common.h")
    if os.path.isfile(header):
        with open(header, encoding="utf-8") as f:
            m = re.search(r'^#define SLUICE_VERSION "([^"]+)"', f.read(), re.M)
        if not m:
            raise BuildError("%s defines no SLUICE_VERSION" % os.path.normpath(header))
        return m.group(1)
    pkg_info = os.path.join(root, "PKG-INFO")
    if os.path.isfile(pkg_info):
        with open(pkg_info, encoding="utf-8") as f:
            m = re.search(r"^Version: (\S+)$", f.read(), re.M)
        if m:
            return m.group(1)
    raise BuildError("cannot tell the version: %s is not in a sluice source tree (no "
                     "../common/include/sluice/common.h) nor an sdist (no PKG-INFO)" % root)


def project(root=HERE):
    """The [project] table, checked, with the version filled in."""
    p = dict(read_pyproject(root).get("project") or {})
    unknown = sorted(set(p) - KNOWN_KEYS)
    if unknown:
        raise BuildError("pyproject.toml [project] has keys this backend does not handle: %s"
                         % ", ".join(unknown))
    if p.get("name") != PACKAGE:
        raise BuildError("pyproject.toml [project] name is %r, expected %r"
                         % (p.get("name"), PACKAGE))
    if "version" in p or "version" not in p.get("dynamic", []):
        raise BuildError("pyproject.toml: the version comes from common.h; "
                         "declare dynamic = [\"version\"] and no version")
    p["version"] = read_version(root)
    return p


def metadata(p, root=HERE):
    """The core metadata (METADATA / PKG-INFO) text of project p."""
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    for req in p.get("dependencies", []):
        lines.append("Requires-Dist: " + req)
    for extra, reqs in sorted(p.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: " + extra)
        for req in reqs:
            lines.append('Requires-Dist: %s; extra == "%s"' % (req, extra))
    body = ""
    if p.get("readme"):
        if not isinstance(p["readme"], str) or not p["readme"].endswith(".md"):
            raise BuildError("pyproject.toml: readme must name a .md file")
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(root, p["readme"]), encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def package_files(root=HERE):
    """(path in the wheel, path on disk) of the package's modules, sorted.
    _installed.py is the build's to write, never taken from the folder."""
    out = []
    pkg = os.path.join(root, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py") and not (dirpath == pkg and fn == "_installed.py"):
                full = os.path.join(dirpath, fn)
                out.append((os.path.relpath(full, root).replace(os.sep, "/"), full))
    if not out:
        raise BuildError("no modules in %s" % pkg)
    return out


def installed_py(version, libdir=None):
    """The text of sluice/_installed.py (make install writes the same)."""
    return ("# Recorded at installation; not in the source tree.\n"
            "VERSION = %r\nLIBDIR = %r\n" % (version, libdir))


# ---- writing ------------------------------------------------------------

def _date_time():
    # Reproducible: SOURCE_DATE_EPOCH when set, else the oldest zip date.
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        return time.gmtime(max(int(epoch), 315532800))[:6]
    return (1980, 1, 1, 0, 0, 0)


class _Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, name, data):
        if isinstance(data, str):
            data = data.encode("utf-8")
        info = zipfile.ZipInfo(name, _date_time())
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append("%s,sha256=%s,%d" % (name, digest, len(data)))

    def close(self, dist_info):
        record = dist_info + "/RECORD"
        self.record.append(record + ",,")
        info = zipfile.ZipInfo(record, _date_time())
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, "\n".join(self.record) + "\n")
        self.zip.close()


def _build(wheel_directory, editable):
    p = project()
    stem = "%s-%s" % (p["name"], p["version"])
    dist_info = stem + ".dist-info"
    filename = stem + "-py3-none-any.whl"
    os.makedirs(wheel_directory, exist_ok=True)
    path = os.path.join(wheel_directory, filename)
    w = _Wheel(path)
    try:
        if editable:
            # An import hook, not a path entry: putting python/ on sys.path
            # would also make backend/ importable.
            pkg = os.path.join(HERE, PACKAGE)
            w.add("_sluice_editable.py",
                  "# Loads the sluice package from its source folder (pip install -e).\n"
                  "import importlib.abc\nimport importlib.util\nimport sys\n\n"
                  "PATH = %r\n\n\n"
                  "class _Finder(importlib.abc.MetaPathFinder):\n"
                  "    def find_spec(self, name, path=None, target=None):\n"
                  "        if name != %r:\n"
                  "            return None\n"
                  "        return importlib.util.spec_from_file_location(\n"
                  "            name, PATH + '/__init__.py',\n"
                  "            submodule_search_locations=[PATH])\n\n\n"
                  "sys.meta_path.append(_Finder())\n" % (pkg, PACKAGE))
            w.add("_sluice_editable.pth", "import _sluice_editable\n")
        else:
            for name, full in package_files():
                with open(full, "rb") as f:
                    w.add(name, f.read())
            w.add(PACKAGE + "/_installed.py", installed_py(p["version"]))
        w.add(dist_info + "/METADATA", metadata(p))
        w.add(dist_info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: sluice_backend\n"
                                    "Root-Is-Purelib: true\nTag: py3-none-any\n")
        w.add(dist_info + "/top_level.txt", PACKAGE + "\n")
        w.close(dist_info)
    except BaseException:
        w.zip.close()
        os.unlink(path)
        raise
    return filename


# ---- PEP 517 / PEP 660 hooks --------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, editable=False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    if not os.path.isfile(HEADER):
        raise BuildError("an editable install needs the sluice source tree (python/ next to "
                         "common/); %s is not in one" % HERE)
    return _build(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    p = project()
    stem = "%s-%s" % (p["name"], p["version"])
    filename = stem + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    mtime = calendar.timegm(_date_time() + (0, 0, 0))
    files = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
             ("backend/sluice_backend.py", os.path.abspath(__file__))]
    if p.get("readme"):
        files.append((p["readme"], os.path.join(HERE, p["readme"])))
    files += package_files()

    def add(tar, name, data):
        info = tarfile.TarInfo(stem + "/" + name)
        info.size, info.mode, info.mtime = len(data), 0o644, mtime
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz",
                      format=tarfile.PAX_FORMAT) as tar:
        for name, full in files:
            with open(full, "rb") as f:
                add(tar, name, f.read())
        add(tar, "PKG-INFO", metadata(p).encode("utf-8"))
    return filename
