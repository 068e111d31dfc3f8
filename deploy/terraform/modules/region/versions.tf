terraform {
  required_version = ">= 1.6.0"
  required_providers {
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.31"
    }
    # Renders deploy/kubernetes (base, components) with this region's operator file, the same
    # Kustomize that tests/deploy checks, and applies the result object by object.
    kustomization = {
      source  = "kbst/kustomization"
      version = ">= 0.9"
    }
  }
}
