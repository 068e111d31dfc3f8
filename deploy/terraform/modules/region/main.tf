# One regional gateway tier: the Kustomize base (and components) of deploy/kubernetes rendered
# into namespace meridian-<region> with this region's operator file and image. All the
# decisions are in the topology module and the manifests, both checked offline; this module
# only wires them to a cluster.

locals {
  namespace  = "meridian-${var.region}"
  kubernetes = "${path.module}/../../../kubernetes"
  components = concat(
    var.redis == "in-cluster" ? ["${local.kubernetes}/components/redis"] : [],
    var.scale_on_streams ? ["${local.kubernetes}/components/hpa-streams"] : [],
  )
  image = regex("^(?P<name>[^@:]+(?::[0-9]+/[^@:]+)?)(?:[:@](?P<ref>.+))?$", var.image)
}

resource "kubernetes_namespace_v1" "region" {
  metadata {
    name = local.namespace
    labels = {
      "pod-security.kubernetes.io/enforce" = "restricted"
      "meridian.dev/region"                = var.region
    }
  }
}

data "kustomization_overlay" "region" {
  namespace  = local.namespace
  resources  = ["${local.kubernetes}/base"]
  components = local.components

  config_map_generator {
    name     = "meridian-config"
    behavior = "replace"
    literals = ["gateway.yaml=${var.operator_file}"]
  }

  images {
    name     = "meridian"
    new_name = local.image.name
    new_tag  = startswith(coalesce(local.image.ref, "latest"), "sha256:") ? null : local.image.ref
    digest   = startswith(coalesce(local.image.ref, "latest"), "sha256:") ? local.image.ref : null
  }

  replicas {
    name  = "meridian"
    count = var.replicas.initial
  }

  patches {
    target {
      kind = "HorizontalPodAutoscaler"
      name = "meridian"
    }
    patch = jsonencode([
      { op = "replace", path = "/spec/minReplicas", value = var.replicas.min },
      { op = "replace", path = "/spec/maxReplicas", value = var.replicas.max },
    ])
  }

  labels {
    pairs = { "meridian.dev/region" = var.region }
  }
}

# Applied in the provider's three priority groups (namespaces and CRDs first, then most
# objects, then webhooks), the pattern the kustomization provider documents.
resource "kustomization_resource" "p0" {
  for_each   = data.kustomization_overlay.region.ids_prio[0]
  manifest   = data.kustomization_overlay.region.manifests[each.value]
  depends_on = [kubernetes_namespace_v1.region]
}

resource "kustomization_resource" "p1" {
  for_each   = data.kustomization_overlay.region.ids_prio[1]
  manifest   = data.kustomization_overlay.region.manifests[each.value]
  depends_on = [kustomization_resource.p0]
}

resource "kustomization_resource" "p2" {
  for_each   = data.kustomization_overlay.region.ids_prio[2]
  manifest   = data.kustomization_overlay.region.manifests[each.value]
  depends_on = [kustomization_resource.p1]
}
