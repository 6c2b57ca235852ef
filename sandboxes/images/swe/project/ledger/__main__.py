"""python3 -m ledger FILE.csv"""

import sys

from ledger.model import balances, load_csv
from ledger.report import render

if len(sys.argv) != 2:
    sys.exit("usage: python3 -m ledger FILE.csv")
print(render(balances(load_csv(sys.argv[1]))))
