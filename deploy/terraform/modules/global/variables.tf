variable "zone_id" {
  description = "The Route 53 hosted zone that holds var.steering_records' dns_name."
  type        = string
}

variable "steering_records" {
  description = "module.topology.steering_records: one latency record and health check per region."
  type = map(object({
    set_identifier  = string
    dns_name        = string
    latency_region  = string
    target          = string
    health_protocol = string
    health_port     = number
    health_path     = string
  }))
}

variable "ttl_s" {
  description = "TTL of the steering records: how long a resolver keeps sending clients to a region after its health check fails."
  type        = number
  default     = 30
}

variable "health_check" {
  description = "How often Route 53 checks each region's /readyz, and after how many failures the region leaves the answers."
  type = object({
    request_interval_s = optional(number, 10)
    failure_threshold  = optional(number, 3)
  })
  default = {}
}
