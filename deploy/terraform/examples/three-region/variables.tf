variable "regions" {
  description = "See modules/topology."
  type        = any
}

variable "rtt_ms" {
  description = "See modules/topology."
  type        = map(map(number))
}

variable "links" {
  description = "See modules/topology."
  type        = list(object({ from = string, to = string }))
}

variable "backends" {
  description = "See modules/topology."
  type        = any
}

variable "hop_key" {
  description = "See modules/topology."
  type        = object({ file = string, sha256 = string })
  default     = null
}

variable "settings" {
  description = "See modules/topology."
  type        = any
  default     = {}
}

variable "dns_name" {
  description = "The one name clients use."
  type        = string
}

variable "route53_zone_id" {
  description = "Hosted zone of dns_name."
  type        = string
}

variable "image" {
  description = "The gateway image for every region, pinned by digest for production."
  type        = string
  default     = "registry.example.com/meridian/gateway:0.1.0"
}

variable "kubeconfig" {
  description = "Path of the kubeconfig holding one context per region."
  type        = string
  default     = "~/.kube/config"
}

variable "kube_contexts" {
  description = "The kubeconfig context of each region's cluster."
  type        = map(string)
  default = {
    us-east      = "meridian-us-east"
    eu-west      = "meridian-eu-west"
    ap-southeast = "meridian-ap-southeast"
  }
}
