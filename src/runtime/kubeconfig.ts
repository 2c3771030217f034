/**
 * client-node's `KubeConfig` (kubeconfig / in-cluster loading and request authentication), taken
 * from its own module rather than the package index.
 *
 * Why: the index re-exports the whole generated API (≈ 760 model classes and every `*Api`), and
 * their modules are not side-effect free, so a bundler keeps all of them once the index is
 * imported. `dist/config.js` still imports the generated `createConfiguration`, but a tree-shaken
 * bundle of this module (hack/build-cni.sh, coild and coil-egress on Bun) keeps only what
 * `KubeConfig` uses. Our API client is `ApiTransport` (api-transport.ts); client-node is used for
 * the kubeconfig and its types only (README, "coild's runtime").
 */
export { KubeConfig } from '@kubernetes/client-node/dist/config.js';
