# Three regions from one description: the topology renders every region's operator file and
# the steering records; one region stack per cluster; one global steering layer.
#
#   terraform init
#   terraform apply -var-file=three-region.tfvars
#
# Each region's cluster is a kubeconfig context (kube_contexts); Route 53 is reached with the
# AWS credentials of the environment. Secrets (backend API keys, the Redis password) are
# created in each namespace out of band: deploy/README.md.

module "topology" {
  source = "../../modules/topology"

  regions  = var.regions
  rtt_ms   = var.rtt_ms
  links    = var.links
  backends = var.backends
  settings = var.settings
  dns_name = var.dns_name
  hop_key  = var.hop_key
}

provider "aws" {
  region = "us-east-1" # Route 53 is global; its API lives in us-east-1
}

provider "kubernetes" {
  alias          = "us_east"
  config_path    = var.kubeconfig
  config_context = var.kube_contexts["us-east"]
}

provider "kustomization" {
  alias           = "us_east"
  kubeconfig_path = var.kubeconfig
  context         = var.kube_contexts["us-east"]
}

provider "kubernetes" {
  alias          = "eu_west"
  config_path    = var.kubeconfig
  config_context = var.kube_contexts["eu-west"]
}

provider "kustomization" {
  alias           = "eu_west"
  kubeconfig_path = var.kubeconfig
  context         = var.kube_contexts["eu-west"]
}

provider "kubernetes" {
  alias          = "ap_southeast"
  config_path    = var.kubeconfig
  config_context = var.kube_contexts["ap-southeast"]
}

provider "kustomization" {
  alias           = "ap_southeast"
  kubeconfig_path = var.kubeconfig
  context         = var.kube_contexts["ap-southeast"]
}

module "us_east" {
  source        = "../../modules/region"
  providers     = { kubernetes = kubernetes.us_east, kustomization = kustomization.us_east }
  region        = "us-east"
  operator_file = module.topology.operator_files["us-east"]
  image         = var.image
  redis         = "in-cluster"
  replicas      = { initial = 4, min = 4, max = 30 }
}

module "eu_west" {
  source        = "../../modules/region"
  providers     = { kubernetes = kubernetes.eu_west, kustomization = kustomization.eu_west }
  region        = "eu-west"
  operator_file = module.topology.operator_files["eu-west"]
  image         = var.image
  redis         = "external"
}

module "ap_southeast" {
  source           = "../../modules/region"
  providers        = { kubernetes = kubernetes.ap_southeast, kustomization = kustomization.ap_southeast }
  region           = "ap-southeast"
  operator_file    = module.topology.operator_files["ap-southeast"]
  image            = var.image
  redis            = "external"
  scale_on_streams = true
  replicas         = { initial = 3, min = 3, max = 12 }
}

module "global" {
  source           = "../../modules/global"
  zone_id          = var.route53_zone_id
  steering_records = module.topology.steering_records
}
