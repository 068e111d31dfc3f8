variable "regions" {
  description = "Regions with a Meridian gateway tier: where it is (for GeoIP distances), the URL clients and other regions reach it at, its shared-state Redis and its DNS steering target."
  type = map(object({
    location    = object({ lat = number, lon = number })
    gateway_url = string
    # Latency-based DNS: the provider's region whose latency table answers for this gateway
    # (AWS Route 53: an AWS region such as us-east-1).
    latency_region = string
    redis = optional(object({
      url           = string
      password_file = optional(string)
      tls           = optional(bool, false)
    }))
  }))
  validation {
    condition     = alltrue([for name in keys(var.regions) : can(regex("^[a-z0-9][a-z0-9-]{0,62}$", name))])
    error_message = "Region names are lowercase letters, digits and dashes (as Meridian's config requires)."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : can(regex("^https?://[^/]+$", r.gateway_url))])
    error_message = "gateway_url is scheme://host[:port] with no path (the chain link adds /v1)."
  }
}

variable "rtt_ms" {
  description = "Measured round trip between regions, in milliseconds: rtt_ms[from][to]. Each direction may be given; a missing one is taken from the other direction. Within a region it is local_rtt_ms."
  type        = map(map(number))
}

variable "local_rtt_ms" {
  description = "Round trip from a gateway to a backend in its own region, in milliseconds."
  type        = number
  default     = 1
}

variable "links" {
  description = "Chain links between regional gateways: the gateway in `from` may forward to the gateway in `to` (a backend of kind gateway). One-way; give both directions for a mesh."
  type        = list(object({ from = string, to = string }))
  default     = []
}

variable "backends" {
  description = "Serving backends, each in one region: kind (dedicated or serverless), engine, URL (with /v1), models, capacity hints and prices. api_key_file is where the API key is mounted (never the key itself)."
  type = list(object({
    name         = string
    region       = string
    kind         = optional(string, "dedicated")
    engine       = optional(string, "vllm")
    url          = string
    models       = list(string)
    api_key_file = optional(string)
    capacity     = optional(map(number))
    price        = optional(map(number))
  }))
  validation {
    condition     = alltrue([for b in var.backends : contains(["dedicated", "serverless"], b.kind)])
    error_message = "A backend's kind is dedicated or serverless; links between gateways are var.links."
  }
}

variable "listen" {
  description = "Ports every regional gateway listens on (inside its pod or container)."
  type = object({
    host      = optional(string, "0.0.0.0")
    port      = optional(number, 8080)
    grpc_port = optional(number, 50051)
  })
  default = {}
}

variable "admin" {
  description = "The admin listener (/metrics, state, readiness details): reachable by Prometheus inside the pod network, never published. Kubernetes' meridian-admin Service and ServiceMonitor use this port."
  type = object({
    host = optional(string, "0.0.0.0")
    port = optional(number, 9090)
  })
  default = {}
}

variable "hop_key" {
  description = "How regional gateways authenticate to each other on chain links: the file each one reads the shared hop secret from (sent as its Bearer key), and that secret's SHA-256 in hex (each gateway accepts it as a hop; a hash, not the secret). null: no hop key (links then need auth off)."
  type = object({
    file   = string
    sha256 = string
  })
  default = null
  validation {
    condition     = var.hop_key == null || can(regex("^[0-9a-f]{64}$", var.hop_key.sha256))
    error_message = "hop_key.sha256 is 64 lowercase hex digits (sha256sum of the secret file)."
  }
}

variable "drain" {
  description = "Graceful stop: seconds readiness fails before draining starts, and the drain deadline. The Kubernetes terminationGracePeriodSeconds must exceed their sum (see steering output)."
  type = object({
    readiness_grace_s = optional(number, 5)
    deadline_s        = optional(number, 30)
  })
  default = {}
}

variable "settings" {
  description = "Further top-level sections of the operator file, the same in every region (routing, timeouts, limits, logging, ...), as Meridian's config schema defines them."
  type        = any
  default     = {}
}

variable "dns_name" {
  description = "The one name clients use; latency-based records under it steer each client to the nearest healthy region."
  type        = string
  default     = "gateway.example.com"
}
