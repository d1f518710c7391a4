"""Package layout: one import root, `tidescale`, read from `[tool.tidescale.layout]` in pyproject.toml.

`exporters/`, `alerts/`, `autoscaler/` and `dashboards/` stay at the top of the repository (the design
card fixes them there) but install as `tidescale.exporters`, `tidescale.alerts`, … so that nothing
generic lands at the top of site-packages. A wheel (`pip install .`, the image) holds the product only:
the dev areas (the simulator, the dev stack, the benchmarks) are left out, and run from a checkout,
where the editable install finds them under `tidescale/`. Subpackages are found, not listed, so a new
one needs no edit here.
"""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

LAYOUT = tomllib.loads((Path(__file__).parent / "pyproject.toml").read_text())["tool"]["tidescale"]["layout"]
DEV_AREAS = [f"tidescale.{area}" for area in LAYOUT["dev"]]

packages = find_packages(include=["tidescale", "tidescale.*"],
                         exclude=[*DEV_AREAS, *(f"{area}.*" for area in DEV_AREAS)])
package_dir = {"tidescale": "tidescale"}
for folder in LAYOUT["product"]:
    package_dir[f"tidescale.{folder}"] = folder
    packages += [f"tidescale.{name}" for name in find_packages(include=[folder, f"{folder}.*"])]

setup(packages=packages, package_dir=package_dir)
