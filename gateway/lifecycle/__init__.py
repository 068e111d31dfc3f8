"""A request's life as data: how it ended (:mod:`.outcome`), decided once for every door."""
