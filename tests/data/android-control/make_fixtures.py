"""Writes the AndroidControl fixtures of this folder (run from the repository root):

    .venv/bin/python tests/data/android-control/make_fixtures.py

The episodes are defined in tests/collectors/android_control_support.py and encoded with the
official google.protobuf library from descriptors of the published .proto files; see that module.
  android_control-00000-of-00001  GZIP-compressed TFRecord, no extension, like the published shards:
                                  two good episodes (7021: 3 actions, 13452: 1 action)
  mixed_records.tfrecord          uncompressed TFRecord, six records: good (501), 2 trees for 2 actions
                                  (502), an Example cut after 100 bytes (503), a wrong data CRC (504), an
                                  action without action_type (505), good without screenshots (506)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from tests.collectors.android_control_support import write_fixtures  # noqa: E402

if __name__ == "__main__":
    for path in write_fixtures(HERE):
        print(f"{path.relative_to(HERE.parents[2])}: {path.stat().st_size} bytes")
