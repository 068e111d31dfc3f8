locals {
  region_names = sort(keys(var.regions))

  # rtt[from][to], filled from the other direction when only one is given.
  rtt = {
    for from in local.region_names : from => {
      for to in local.region_names : to => (
        from == to ? var.local_rtt_ms : try(var.rtt_ms[from][to], var.rtt_ms[to][from], null)
      )
    }
  }

  models_in = {
    for name in local.region_names : name => sort(distinct(flatten([
      for b in var.backends : b.models if b.region == name
    ])))
  }

  # Backends as Meridian's config spells them, with unset optional parts left out.
  backend_entries = {
    for b in var.backends : b.name => { for k, v in {
      name     = b.name
      region   = b.region
      kind     = b.kind
      engine   = b.engine
      url      = b.url
      models   = b.models
      api_key  = b.api_key_file == null ? null : { file = b.api_key_file }
      capacity = b.capacity
      price    = b.price
    } : k => v if v != null }
  }

  # A link from -> to is a backend of kind gateway in `from`'s file, serving what `to` serves.
  link_entries = {
    for link in var.links : link.from => { for k, v in {
      name   = "${link.to}-gateway"
      region = link.to
      kind   = "gateway"
      engine = "meridian"
      url    = "${var.regions[link.to].gateway_url}/v1"
      models = local.models_in[link.to]
      # The hop secret, as a file reference; the linked gateway accepts its hash (auth below).
      api_key = var.hop_key == null ? null : { file = var.hop_key.file }
    } : k => v if v != null }...
  }

  # Through JSON, because the two branches are objects of different shapes (Terraform's
  # conditional wants one type).
  # Clients need an API key (meridian keys create --redis-url ..., kept in the region's Redis);
  # the other regions' gateways come in with the hop key.
  auth = jsondecode(var.hop_key == null ? jsonencode({ mode = "keys" }) : jsonencode({
    mode     = "keys"
    hop_keys = [var.hop_key.sha256]
  }))

  state = {
    for name, r in var.regions : name => jsondecode(r.redis == null ? jsonencode({ backend = "memory" }) : jsonencode({
      for k, v in {
        backend       = "redis"
        url           = r.redis.url
        password_file = r.redis.password_file
        tls           = r.redis.tls ? { enabled = true } : null
        key_prefix    = "meridian-${name}"
      } : k => v if v != null
    }))
  }

  operator_configs = {
    for name in local.region_names : name => merge(var.settings, {
      version = 1 # the operator file format (docs/config-migration.md)
      region  = name
      listen  = var.listen
      admin   = var.admin
      regions = [for other in local.region_names : {
        name     = other
        location = var.regions[other].location
        rtt_ms   = local.rtt[name][other]
      }]
      backends = concat(
        [for b in var.backends : local.backend_entries[b.name] if b.region == name],
        lookup(local.link_entries, name, []),
      )
      state  = local.state[name]
      auth   = local.auth
      chain  = { id = "${name}-gw" }
      drain  = var.drain
      reload = { watch_interval_s = 10 }
    })
  }

  header = <<-EOT
    # Rendered by deploy/terraform/modules/topology; do not edit by hand: change the topology
    # (regions, backends, links) and run deploy/terraform/render.sh. Check: meridian check-config
  EOT
}
