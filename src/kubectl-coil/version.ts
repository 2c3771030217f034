/**
 * The tool's version, written into every `ipam check` report and compared by `ipam release`:
 * the chart's appVersion, which is also the image's tag (charts/coil/Chart.yaml; a test keeps
 * them equal). A constant rather than a file read at run time: the tool runs as one bundle.
 */
export const KUBECTL_COIL_VERSION = '0.2.0';
