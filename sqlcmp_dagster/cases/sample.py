"""The bundled sample: a small shop database the project builds itself, and the suites of cases on it.

The data is generated from a fixed seed, so every build is byte-for-byte the same database (its fingerprint is
stable and the suite's expectations hold). It has what result comparison must cope with: NULLs, duplicate
names, floats that are not exactly representable, ISO dates as text, and customers without orders.
"""

from __future__ import annotations

import os
import random
import sqlite3
from importlib.resources import files
from pathlib import Path

from sqlcmp_dagster.engine.atomic import atomic_path

SAMPLE_DB_ID = "shop"
#: The suite whose every expected query runs: the demo's main workload and the self-comparison invariant's.
SAMPLE_SUITE = "suite.jsonl"
#: Cases whose expected query is broken on purpose: they show how invalid cases are reported and counted.
INVALID_SUITE = "invalid_cases.jsonl"

_SCHEMA = """
CREATE TABLE categories (category_id INTEGER PRIMARY KEY, name TEXT NOT NULL, parent_id INTEGER);
CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, email TEXT,
                        signup_date TEXT NOT NULL);
CREATE TABLE products (product_id INTEGER PRIMARY KEY, name TEXT NOT NULL, category_id INTEGER NOT NULL
                       REFERENCES categories(category_id), price REAL NOT NULL, discontinued INTEGER NOT NULL);
CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(customer_id),
                     order_date TEXT NOT NULL, status TEXT NOT NULL, discount REAL);
CREATE TABLE order_items (order_id INTEGER NOT NULL REFERENCES orders(order_id), product_id INTEGER NOT NULL
                          REFERENCES products(product_id), quantity INTEGER NOT NULL, unit_price REAL NOT NULL);
"""
_CATEGORIES = [(1, "Books", None), (2, "Fiction", 1), (3, "Science", 1), (4, "Games", None), (5, "Garden", None)]
_CITIES = ["Lisbon", "Porto", "Berlin", "Madrid", None]
_FIRST = ["Ana", "Bruno", "Carla", "David", "Eva", "Filipe", "Greta", "Hugo", "Ines", "Jonas"]
_PRODUCTS = [
    ("Dune", 2, 9.99), ("Foundation", 2, 8.5), ("Cosmos", 3, 14.25), ("Brief History", 3, 12.1),
    ("Chess Set", 4, 35.0), ("Go Board", 4, 49.9), ("Puzzle 1000", 4, 19.99), ("Seeds Mix", 5, 3.3),
    ("Hose 20m", 5, 24.95), ("Shovel", 5, 17.0), ("Rake", 5, 17.0), ("Atlas", 3, 29.99),
]
_STATUSES = ["shipped", "shipped", "shipped", "pending", "cancelled"]


def build_sample_database(path: Path) -> Path:
    """Write the sample database to ``path`` (replacing it atomically) and return the path."""
    with atomic_path(path) as partial:
        rng = random.Random(20260401)
        connection = sqlite3.connect(partial)
        try:
            connection.executescript(_SCHEMA)
            connection.executemany("INSERT INTO categories VALUES (?, ?, ?)", _CATEGORIES)
            customers = []
            for customer_id in range(1, 25):
                name = _FIRST[(customer_id - 1) % len(_FIRST)]  # names repeat: duplicates in projections
                city = _CITIES[rng.randrange(len(_CITIES))]
                email = None if customer_id % 6 == 0 else f"{name.lower()}{customer_id}@example.com"
                signup = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
                customers.append((customer_id, name, city, email, signup))
            connection.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?)", customers)
            connection.executemany(
                "INSERT INTO products VALUES (?, ?, ?, ?, ?)",
                [(i, name, category, price, int(i % 5 == 0)) for i, (name, category, price) in enumerate(_PRODUCTS, 1)],
            )
            orders, items = [], []
            for order_id in range(1, 61):
                customer_id = rng.randint(1, 20)  # customers 21-24 never order: LEFT vs INNER JOIN differ
                discount = None if order_id % 4 else round(rng.choice([0.05, 0.1, 0.15]), 2)
                date = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
                orders.append((order_id, customer_id, date, _STATUSES[rng.randrange(len(_STATUSES))], discount))
                for product_id in rng.sample(range(1, len(_PRODUCTS) + 1), rng.randint(1, 4)):
                    items.append((order_id, product_id, rng.randint(1, 5), _PRODUCTS[product_id - 1][2]))
            connection.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", orders)
            connection.executemany("INSERT INTO order_items VALUES (?, ?, ?, ?)", items)
            connection.commit()
        finally:
            connection.close()
    return path


def sample_db_dir(root: Path | None = None) -> Path:
    """A folder holding ``shop.sqlite``, built on first use (``$SQLCMP_SAMPLE_DIR`` or a per-user cache)."""
    base = root or Path(os.environ.get("SQLCMP_SAMPLE_DIR", Path.home() / ".cache" / "sqlcmp" / "sample"))
    target = base / f"{SAMPLE_DB_ID}.sqlite"
    if not target.is_file():
        build_sample_database(target)
    return base


def sample_suite_path(name: str = SAMPLE_SUITE) -> Path:
    """Path of a bundled suite file."""
    return Path(str(files("sqlcmp_dagster.cases").joinpath("sample").joinpath(name)))
