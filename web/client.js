// The GUI's calls: JSON with the login's CSRF token; not logged in means off to the login.
let csrf = '';

export async function loadMe() {
  const response = await fetch('/api/me', { credentials: 'same-origin' });
  if (response.status === 401) {
    location.href = `/auth/login?returnTo=${encodeURIComponent(location.pathname)}`;
    return undefined;
  }
  const me = await response.json();
  csrf = me.csrf;
  return me;
}

/** The login's CSRF token, for a request api() does not make (an upload's raw bytes). */
export const csrfToken = () => csrf;

export async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    credentials: 'same-origin',
    headers: { 'X-CSRF-Token': csrf, ...(body && { 'Content-Type': 'application/json' }) },
    ...(body && { body: JSON.stringify(body) }),
  });
  if (response.status === 401)
    location.href = `/auth/login?returnTo=${encodeURIComponent(location.pathname)}`;
  if (!response.ok) {
    const refusal = await response.json().catch(() => ({}));
    // A form's refusal says, besides, what was wrong at which field.
    throw Object.assign(new Error(refusal.message ?? response.statusText), { fields: refusal.fields ?? {} });
  }
  return response.status === 204 ? undefined : response.json();
}
