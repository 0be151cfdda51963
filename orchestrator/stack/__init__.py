"""The embedded stack: `berth up` runs every Berth process on one machine and keeps them alive."""
