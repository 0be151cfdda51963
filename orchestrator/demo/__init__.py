"""The demo `berth up --demo` runs: sample agents written with the public SDK only."""
