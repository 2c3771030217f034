/**
 * Kubernetes' name, label and percent checks with apimachinery's exact messages
 * (k8s.io/apimachinery/pkg/util/validation), as Coil calls them from its Egress webhook. Pure.
 *
 * @see docs/compatibility.md#egress-webhooks; Kubernetes "Labels and Selectors", "Annotations"
 */

const QUALIFIED_NAME_FMT = '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]';
const QUALIFIED_NAME = new RegExp(`^${QUALIFIED_NAME_FMT}$`);
const QUALIFIED_NAME_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT = `(${QUALIFIED_NAME_FMT})?`;
const LABEL_VALUE = new RegExp(`^${LABEL_VALUE_FMT}$`);
const LABEL_VALUE_MSG = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_LABEL_FMT = '[a-z0-9]([-a-z0-9]*[a-z0-9])?';
const DNS1123_SUBDOMAIN_FMT = `${DNS1123_LABEL_FMT}(\\.${DNS1123_LABEL_FMT})*`;
const DNS1123_SUBDOMAIN = new RegExp(`^${DNS1123_SUBDOMAIN_FMT}$`);
const DNS1123_SUBDOMAIN_MSG = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const PERCENT_FMT = '[0-9]+%';
const PERCENT = new RegExp(`^${PERCENT_FMT}$`);
const PERCENT_MSG = "a valid percent string must be a numeric string followed by an ending '%'";

/** Maximum length of a label value and of a qualified name's name part. */
export const LABEL_VALUE_MAX_LENGTH = 63;
/** Total size of all annotation keys and values of one object (apimachinery `TotalAnnotationSizeLimitB`). */
export const TOTAL_ANNOTATION_SIZE_LIMIT_BYTES = 256 * 1024;

/** apimachinery `RegexError`: the message, examples and the regex. */
export function regexError(msg: string, fmt: string, ...examples: string[]): string {
  if (examples.length === 0) return `${msg} (regex used for validation is '${fmt}')`;
  return `${msg} (e.g. ${examples.map((e) => `'${e}'`).join(' or ')}, regex used for validation is '${fmt}')`;
}

/** apimachinery `MaxLenError`. */
export function maxLenError(length: number): string {
  return `must be no more than ${length} characters`;
}

/** apimachinery `IsDNS1123Subdomain`. @returns the failure messages, empty when valid */
export function isDns1123Subdomain(value: string): string[] {
  const errs: string[] = [];
  if (value.length > 253) errs.push(maxLenError(253));
  if (!DNS1123_SUBDOMAIN.test(value)) errs.push(regexError(DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, 'example.com'));
  return errs;
}

/**
 * apimachinery `IsQualifiedName`: `[prefix/]name`, the form of label and annotation keys.
 * @returns the failure messages, empty when valid
 */
export function isQualifiedName(value: string): string[] {
  const errs: string[] = [];
  const parts = value.split('/');
  let name: string;
  if (parts.length === 1) {
    name = parts[0]!;
  } else if (parts.length === 2) {
    const prefix = parts[0]!;
    name = parts[1]!;
    if (prefix.length === 0) errs.push('prefix part must be non-empty');
    else errs.push(...isDns1123Subdomain(prefix).map((m) => `prefix part ${m}`));
  } else {
    return [
      `a qualified name ${regexError(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, 'MyName', 'my.name', '123-abc')} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')`,
    ];
  }
  if (name.length === 0) errs.push('name part must be non-empty');
  else if (name.length > LABEL_VALUE_MAX_LENGTH) errs.push(`name part ${maxLenError(LABEL_VALUE_MAX_LENGTH)}`);
  if (!QUALIFIED_NAME.test(name)) errs.push(`name part ${regexError(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, 'MyName', 'my.name', '123-abc')}`);
  return errs;
}

/** apimachinery `IsValidLabelValue`. @returns the failure messages, empty when valid */
export function isValidLabelValue(value: string): string[] {
  const errs: string[] = [];
  if (value.length > LABEL_VALUE_MAX_LENGTH) errs.push(maxLenError(LABEL_VALUE_MAX_LENGTH));
  if (!LABEL_VALUE.test(value)) errs.push(regexError(LABEL_VALUE_MSG, LABEL_VALUE_FMT, 'MyValue', 'my_value', '12345'));
  return errs;
}

/** apimachinery `IsValidPercent` (`"25%"`). @returns the failure messages, empty when valid */
export function isValidPercent(value: string): string[] {
  return PERCENT.test(value) ? [] : [regexError(PERCENT_MSG, PERCENT_FMT, '1%', '93%')];
}

/** The number of a valid percent string (`"25%"` → 25), else undefined (apps `getPercentValue`). */
export function percentValue(value: number | string): number | undefined {
  return typeof value === 'string' && PERCENT.test(value) ? Number(value.slice(0, -1)) : undefined;
}
