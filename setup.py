"""Package layout: one import root, `tidescale`, with the design card's top-level folders mapped under it.

`exporters/`, `alerts/`, `autoscaler/` and `dashboards/` stay at the top of the repository (the design
card fixes them there) but install as `tidescale.exporters`, `tidescale.alerts`, … so that nothing
generic lands at the top of site-packages. The list is computed, not written out, so a new
subpackage needs no edit here and an image build that leaves the dev stack out still builds.
"""

from setuptools import find_packages, setup

PRODUCT_FOLDERS = ("exporters", "alerts", "autoscaler", "dashboards")

packages = find_packages(include=["tidescale", "tidescale.*"])
package_dir = {"tidescale": "tidescale"}
for folder in PRODUCT_FOLDERS:
    package_dir[f"tidescale.{folder}"] = folder
    packages += [f"tidescale.{name}" for name in find_packages(include=[folder, f"{folder}.*"])]

setup(packages=packages, package_dir=package_dir)
