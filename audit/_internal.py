"""What jaxport's own packages (the registry) use of ``jaxport.audit`` beyond its public names:
the one private module of the package another may import (``tests/test_layering.py``).
Nothing here is API: any name may change between releases.

- The jax-release watcher's index reading and verdicts (``audit/_watch.py``): what the
  registry's watch (``registry/_releases.py``) and forecast (``registry/_forecast.py``) call.
- ``Capabilities``: what a static audit judges against (``audit/_static.py``).

Names load on first use (``jaxport._lazy``): importing this module imports neither httpx nor
jax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxport._lazy import attach

if TYPE_CHECKING:
    from jaxport.audit._static import Capabilities as Capabilities
    from jaxport.audit._watch import IndexRelease as IndexRelease
    from jaxport.audit._watch import ReleaseVerdict as ReleaseVerdict
    from jaxport.audit._watch import index_url as index_url
    from jaxport.audit._watch import newer_releases as newer_releases
    from jaxport.audit._watch import projected_capabilities as projected_capabilities
    from jaxport.audit._watch import read_releases as read_releases
    from jaxport.audit._watch import release_day as release_day
    from jaxport.audit._watch import release_verdict as release_verdict
    from jaxport.audit._watch import shown_url as shown_url

__all__, __getattr__, __dir__ = attach(__name__)
