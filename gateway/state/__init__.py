"""Shared state between gateway replicas: in-memory by default, Redis or Redis Cluster when
configured; the request path reads a local view and never waits on the store.

Import from the submodules (``gateway.state.config``, ``gateway.state.sync``, ...): this
package deliberately re-exports nothing, so loading the config model does not import redis.
See README.md in this directory for the key layout, bounds and failure behaviour.
"""
