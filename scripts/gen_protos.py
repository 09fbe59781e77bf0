"""Generate the protobuf/gRPC stubs in shared/gen from protos/.

Run as `python scripts/gen_protos.py [OUT_DIR]`. The output is never edited by hand; the test
suite regenerates into a temporary folder and fails if the checked-in stubs differ.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
PACKAGE = "shared.gen"


def generate(out_dir: Path) -> None:
    """Write *_pb2.py, *_pb2_grpc.py and *_pb2.pyi for every .proto under protos/ into out_dir."""
    sources = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{PROTOS}",
            f"-I{well_known}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *sources,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        shutil.copytree(tmp, out_dir)
    # protoc writes imports relative to the proto root ("from deskfleet.v1 import x_pb2");
    # the stubs live inside the shared package, so the imports are made absolute.
    for path in out_dir.rglob("*.py*"):
        text = path.read_text()
        fixed = re.sub(
            r"^from deskfleet\.v1 import", f"from {PACKAGE}.deskfleet.v1 import", text, flags=re.M
        )
        path.write_text(fixed)
    for pkg in [out_dir, *[p for p in out_dir.rglob("*") if p.is_dir()]]:
        (pkg / "__init__.py").touch()


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "shared" / "gen"
    generate(target)
    print(f"generated stubs in {target}")
