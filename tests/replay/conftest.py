import sys
from pathlib import Path

# bagmaker.py (test helper that writes bags) sits next to the tests.
sys.path.insert(0, str(Path(__file__).parent))
