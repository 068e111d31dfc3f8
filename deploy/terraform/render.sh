#!/bin/sh
# Render the topology of a tfvars file without any provider or cloud: every region's operator
# file and the steering records, through modules/topology alone.
#   deploy/terraform/render.sh [TFVARS] [OUT_DIR]
# Defaults: examples/three-region/three-region.tfvars into deploy/kubernetes/overlays/<region>/
# (the Kustomize overlays ship these files; tests/deploy fails when they drift). With OUT_DIR:
# OUT_DIR/<region>.yaml and OUT_DIR/steering.json.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TFVARS=$(realpath "${1:-$HERE/examples/three-region/three-region.tfvars}")
OUT=${2:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export TF_CLI_CONFIG_FILE=/dev/null TF_DATA_DIR="$WORK/.terraform" TF_IN_AUTOMATION=1

cat >"$WORK/main.tf" <<HCL
module "topology" {
  source   = "$HERE/modules/topology"
  regions  = var.regions
  rtt_ms   = var.rtt_ms
  links    = var.links
  backends = var.backends
  settings = var.settings
  dns_name = var.dns_name
  hop_key  = var.hop_key
}
variable "regions" { type = any }
variable "rtt_ms" { type = any }
variable "links" { type = any }
variable "backends" { type = any }
variable "settings" { type = any }
variable "dns_name" { type = string }
variable "hop_key" {
  type    = any
  default = null
}
output "operator_files" { value = module.topology.operator_files }
output "steering_records" { value = module.topology.steering_records }
HCL
# The example's tfvars also set the provider modules' inputs: declare them so terraform does
# not warn about undeclared variables.
for extra in route53_zone_id image kubeconfig kube_contexts; do
    printf 'variable "%s" {\n  type    = any\n  default = null\n}\n' "$extra" >>"$WORK/main.tf"
done
(cd "$WORK" && terraform init -input=false >/dev/null \
    && terraform apply -auto-approve -input=false -var-file="$TFVARS" >/dev/null \
    && terraform output -json >"$WORK/outputs.json")
python3 - "$WORK/outputs.json" "$HERE/../kubernetes/overlays" "$OUT" <<'PY'
import json, pathlib, sys
outputs = json.load(open(sys.argv[1]))
overlays, out = pathlib.Path(sys.argv[2]), sys.argv[3]
for region, text in outputs["operator_files"]["value"].items():
    path = pathlib.Path(out) / f"{region}.yaml" if out else overlays / region / "gateway.yaml"
    path.write_text(text)
    print(f"render: {path}")
if out:
    steering = pathlib.Path(out) / "steering.json"
    steering.write_text(json.dumps(outputs["steering_records"]["value"], indent=2))
    print(f"render: {steering}")
PY
