variable "region" {
  description = "The region's name, as in the topology (us-east, ...)."
  type        = string
}

variable "operator_file" {
  description = "This region's operator file: module.topology.operator_files[region]."
  type        = string
}

variable "image" {
  description = "The gateway image, pinned: registry/name@sha256:... (or :tag)."
  type        = string
}

variable "replicas" {
  description = "Gateway replicas the Deployment starts with; the HPA moves between min and max."
  type        = object({ initial = number, min = number, max = number })
  default     = { initial = 3, min = 3, max = 20 }
}

variable "redis" {
  description = "in-cluster: a Redis StatefulSet beside the gateways (small setups); external: the operator file's state.url points at a managed Redis created elsewhere; none: in-memory state."
  type        = string
  default     = "external"
  validation {
    condition     = contains(["in-cluster", "external", "none"], var.redis)
    error_message = "redis is in-cluster, external or none."
  }
}

variable "scale_on_streams" {
  description = "Also scale on open upstream streams per pod (needs prometheus-adapter serving meridian_upstream_in_flight)."
  type        = bool
  default     = false
}

variable "secrets_name" {
  description = "The Secret holding backend API keys and the Redis password as files, created out of band (never in Terraform state)."
  type        = string
  default     = "meridian-secrets"
}
