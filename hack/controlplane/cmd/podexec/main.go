// Command podexec is the kubelet's exec endpoint for the pods that kwok simulates.
//
// kwok plays the kubelet for a node's lifecycle and its pods' status; this program serves
// what kube-apiserver proxies `pods/exec` to (https://<node InternalIP>:<kubelet port>/exec/...),
// with k8s.io/cri-streaming, the same streaming server the kubelet uses. kwok's own local
// exec cannot stand in here: it never closes the command's stdin (so `tar -x` reading a
// stream never ends) and reports a non-zero exit as an internal error without its code.
//
// Each command runs on this machine as the pod would run it:
//   - in a mount namespace of its own, where the pod's directory is /workspace and each of
//     the container's volumes under /workspace or /run is mounted at its mountPath
//     (emptyDir and PVC directories, ConfigMap and Secret volumes written out as files);
//     nothing of the machine's own /workspace or /run is touched (a mount point under /run
//     is created empty on the machine, and mounted over only inside the namespace);
//   - with the container's environment, Secret and ConfigMap references resolved;
//   - as the pod's runAsUser, runAsGroup and fsGroup;
//   - with the simulated image's programs (--image-bin) at /usr/local/bin, first on PATH.
//
// Usage: podexec serve --address 127.0.0.1:PORT --kubeconfig FILE --tls-cert-file F
// --tls-private-key-file F --client-ca-file F --pods-dir DIR --volumes-dir DIR --image-bin DIR
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "enter" {
		enter(os.Args[2:])
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: podexec serve [flags]")
		os.Exit(2)
	}
	flags := flag.NewFlagSet("serve", flag.ExitOnError)
	address := flags.String("address", "127.0.0.1:10250", "host:port to serve on")
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig to read pods, Secrets and ConfigMaps with")
	certFile := flags.String("tls-cert-file", "", "serving certificate")
	keyFile := flags.String("tls-private-key-file", "", "serving key")
	clientCA := flags.String("client-ca-file", "", "CA that signs the API server's client certificate")
	podsDir := flags.String("pods-dir", "", "where each pod's files live, one directory per pod uid")
	volumesDir := flags.String("volumes-dir", "", "where PersistentVolumeClaims' files live")
	imageBin := flags.String("image-bin", "", "the simulated image's programs, mounted at /usr/local/bin")
	_ = flags.Parse(os.Args[2:])

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("reading %s: %v", *kubeconfig, err)
	}
	config.QPS, config.Burst = 200, 400
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		log.Fatalf("making a client: %v", err)
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(*clientCA)
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		log.Fatalf("reading the client CA %s: %v", *clientCA, err)
	}
	pods := &podRunner{client: client, podsDir: *podsDir, volumesDir: *volumesDir, imageBin: *imageBin}
	go pods.collectGarbage(context.Background(), time.Minute)

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/exec/", pods.serveExec)
	server := &http.Server{
		Addr:    *address,
		Handler: mux,
		TLSConfig: &tls.Config{
			ClientAuth: tls.RequireAndVerifyClientCert,
			ClientCAs:  pool,
			MinVersion: tls.VersionTLS12,
		},
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Printf("serving pod exec on https://%s", *address)
	log.Fatal(server.ListenAndServeTLS(*certFile, *keyFile))
}

type podRunner struct {
	client     kubernetes.Interface
	podsDir    string
	volumesDir string
	imageBin   string
}

// imagePath is PATH inside a simulated pod: the image's programs, then the machine's.
const imagePath = "/usr/local/bin:/usr/bin:/bin"

// serveExec answers /exec/{namespace}/{pod}/{container} and /exec/{namespace}/{pod}/{uid}/{container}.
func (p *podRunner) serveExec(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/exec/"), "/")
	var namespace, pod, uid, container string
	switch len(parts) {
	case 3:
		namespace, pod, container = parts[0], parts[1], parts[2]
	case 4:
		namespace, pod, uid, container = parts[0], parts[1], parts[2], parts[3]
	default:
		http.Error(w, "expected /exec/{namespace}/{pod}/{container}", http.StatusNotFound)
		return
	}
	options, err := remotecommand.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	command := req.URL.Query()["command"]
	remotecommand.ServeExec(w, req, p, namespace+"/"+pod, uid, container, command, options,
		4*time.Hour, 30*time.Second, remotecommand.SupportedStreamingProtocols)
}

// ExecInContainer runs cmd in the pod's mount namespace; see the package comment.
func (p *podRunner) ExecInContainer(ctx context.Context, name string, _ string, containerName string,
	cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool,
	resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	if len(cmd) == 0 {
		return errors.New("no command given")
	}
	namespace, podName, _ := strings.Cut(name, "/")
	pod, err := p.client.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading pod %s: %w", name, err)
	}
	if pod.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod %s is not running (phase %q)", name, pod.Status.Phase)
	}
	container := findContainer(pod, containerName)
	if container == nil {
		return fmt.Errorf("container %q not found in pod %s", containerName, name)
	}
	env, err := p.environment(ctx, pod, container)
	if err != nil {
		return err
	}
	uid, gid, groups := identity(pod, container)
	mounts, err := p.prepareVolumes(ctx, pod, container, uid, groups)
	if err != nil {
		return err
	}

	// The child enters a mount namespace of its own (Go makes its mounts private first),
	// binds the pod's directories, drops to the pod's user and runs the command.
	args := []string{"enter", strconv.Itoa(uid), strconv.Itoa(gid), joinInts(groups)}
	args = append(args, mounts...)
	args = append(args, "--")
	args = append(args, cmd...)
	child := exec.Command("/proc/self/exe", args...)
	child.Env = env
	if tty {
		return runWithTerminal(ctx, child, in, out, resize)
	}
	child.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true}
	child.Stdout, child.Stderr = out, errOut
	var stdin io.WriteCloser
	if in != nil {
		if stdin, err = child.StdinPipe(); err != nil {
			return err
		}
	}
	if err := child.Start(); err != nil {
		return fmt.Errorf("starting %q: %w", cmd[0], err)
	}
	if stdin != nil {
		go func() {
			// The kubelet closes the command's stdin when the client closes its own.
			_, _ = io.Copy(stdin, in)
			_ = stdin.Close()
		}()
	}
	go func() {
		<-ctx.Done()
		if child.Process != nil {
			_ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL)
		}
	}()
	return exitStatus(child.Wait())
}

// exitStatus reports a command's non-zero exit as the kubelet does, with its code.
func exitStatus(err error) error {
	var exitError *exec.ExitError
	if errors.As(err, &exitError) && exitError.Exited() {
		return utilexec.CodeExitError{Err: err, Code: exitError.ExitCode()}
	}
	return err
}

// runWithTerminal runs child on a new pseudo-terminal (kubectl exec -it): its own session
// with the terminal as controlling terminal; stdout and stderr both arrive on out.
func runWithTerminal(ctx context.Context, child *exec.Cmd, in io.Reader, out io.Writer,
	resize <-chan remotecommand.TerminalSize) error {
	terminal, err := pty.StartWithAttrs(child, nil, &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS, Setsid: true, Setctty: true,
	})
	if err != nil {
		return fmt.Errorf("starting on a terminal: %w", err)
	}
	defer terminal.Close()
	if resize != nil {
		go func() {
			for size := range resize {
				_ = pty.Setsize(terminal, &pty.Winsize{Rows: size.Height, Cols: size.Width})
			}
		}()
	}
	if in != nil {
		go func() { _, _ = io.Copy(terminal, in) }()
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, terminal) // ends with EIO once the session's last process exits
		close(copied)
	}()
	go func() {
		<-ctx.Done()
		if child.Process != nil {
			_ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL)
		}
	}()
	err = child.Wait()
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	return exitStatus(err)
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if name == "" || pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

func identity(pod *corev1.Pod, container *corev1.Container) (int, int, []int) {
	uid, gid := int64(0), int64(0)
	var groups []int
	if sc := pod.Spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
		if sc.FSGroup != nil {
			groups = append(groups, int(*sc.FSGroup))
		}
		for _, g := range sc.SupplementalGroups {
			groups = append(groups, int(g))
		}
	}
	if sc := container.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
	}
	return int(uid), int(gid), groups
}

// environment is the container's environment as the kubelet would set it.
func (p *podRunner) environment(ctx context.Context, pod *corev1.Pod, container *corev1.Container) ([]string, error) {
	values := map[string]string{"PATH": imagePath, "HOME": "/workspace", "HOSTNAME": pod.Name}
	order := []string{"PATH", "HOME", "HOSTNAME"}
	set := func(key, value string) {
		if _, seen := values[key]; !seen {
			order = append(order, key)
		}
		values[key] = value
	}
	core := p.client.CoreV1()
	for _, source := range container.EnvFrom {
		switch {
		case source.SecretRef != nil:
			secret, err := core.Secrets(pod.Namespace).Get(ctx, source.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("envFrom Secret %s: %w", source.SecretRef.Name, err)
			}
			for key, value := range secret.Data {
				set(source.Prefix+key, string(value))
			}
		case source.ConfigMapRef != nil:
			configMap, err := core.ConfigMaps(pod.Namespace).Get(ctx, source.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("envFrom ConfigMap %s: %w", source.ConfigMapRef.Name, err)
			}
			for key, value := range configMap.Data {
				set(source.Prefix+key, value)
			}
		}
	}
	for _, variable := range container.Env {
		value, err := p.resolve(ctx, pod, variable)
		if err != nil {
			return nil, err
		}
		set(variable.Name, value)
	}
	env := make([]string, 0, len(order))
	for _, key := range order {
		env = append(env, key+"="+values[key])
	}
	return env, nil
}

func (p *podRunner) resolve(ctx context.Context, pod *corev1.Pod, variable corev1.EnvVar) (string, error) {
	from := variable.ValueFrom
	if from == nil {
		return variable.Value, nil
	}
	optional := func(flag *bool, err error) (string, error) {
		if flag != nil && *flag && apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("env %s: %w", variable.Name, err)
	}
	core := p.client.CoreV1()
	switch {
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		secret, err := core.Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return optional(ref.Optional, err)
		}
		return string(secret.Data[ref.Key]), nil
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		configMap, err := core.ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return optional(ref.Optional, err)
		}
		return configMap.Data[ref.Key], nil
	case from.FieldRef != nil:
		switch from.FieldRef.FieldPath {
		case "metadata.name":
			return pod.Name, nil
		case "metadata.namespace":
			return pod.Namespace, nil
		case "metadata.uid":
			return string(pod.UID), nil
		case "spec.nodeName":
			return pod.Spec.NodeName, nil
		case "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		case "status.podIP":
			return pod.Status.PodIP, nil
		case "status.hostIP":
			return pod.Status.HostIP, nil
		}
		return "", fmt.Errorf("env %s: fieldRef %s is not simulated", variable.Name, from.FieldRef.FieldPath)
	}
	return "", fmt.Errorf("env %s: this kind of valueFrom is not simulated", variable.Name)
}

// prepareVolumes makes each mounted volume's directory; "source=target" pairs for enter.
func (p *podRunner) prepareVolumes(ctx context.Context, pod *corev1.Pod, container *corev1.Container,
	uid int, groups []int) ([]string, error) {
	root := filepath.Join(p.podsDir, string(pod.UID))
	owner := uid
	group := 0
	if len(groups) > 0 {
		group = groups[0]
	}
	workspace := filepath.Join(root, "workspace")
	if err := makeOwnedDir(workspace, owner, group); err != nil {
		return nil, err
	}
	mounts := []string{workspace + "=/workspace"}
	if p.imageBin != "" {
		mounts = append(mounts, p.imageBin+"=/usr/local/bin")
	}
	volumes := map[string]corev1.Volume{}
	for _, volume := range pod.Spec.Volumes {
		volumes[volume.Name] = volume
	}
	for _, mount := range container.VolumeMounts {
		volume, ok := volumes[mount.Name]
		if !ok {
			continue
		}
		target := filepath.Clean(mount.MountPath)
		inWorkspace := target == "/workspace" || strings.HasPrefix(target, "/workspace/")
		if !inWorkspace && !strings.HasPrefix(target, "/run/") {
			continue // only /workspace and volumes under /run are simulated
		}
		var source string
		switch {
		case volume.EmptyDir != nil:
			source = filepath.Join(root, "volumes", volume.Name)
			if err := makeOwnedDir(source, owner, group); err != nil {
				return nil, err
			}
		case volume.PersistentVolumeClaim != nil:
			source = filepath.Join(p.volumesDir, pod.Namespace, volume.PersistentVolumeClaim.ClaimName)
			if err := makeOwnedDir(source, owner, group); err != nil {
				return nil, err
			}
		case volume.ConfigMap != nil || volume.Secret != nil:
			files, err := p.projectedFiles(ctx, pod.Namespace, volume)
			if err != nil {
				return nil, err
			}
			source = filepath.Join(root, "volumes", volume.Name)
			if err := writeFiles(source, files); err != nil {
				return nil, err
			}
		default:
			continue
		}
		if mount.SubPath != "" {
			source = filepath.Join(source, mount.SubPath)
		}
		if inWorkspace {
			// The mount point must exist inside the pod's /workspace.
			inside := filepath.Join(workspace, strings.TrimPrefix(target, "/workspace"))
			if err := makeOwnedDir(inside, owner, group); err != nil {
				return nil, err
			}
		}
		mounts = append(mounts, source+"="+target)
	}
	return mounts, nil
}

func (p *podRunner) projectedFiles(ctx context.Context, namespace string, volume corev1.Volume) (map[string][]byte, error) {
	data := map[string][]byte{}
	var items []corev1.KeyToPath
	core := p.client.CoreV1()
	if ref := volume.ConfigMap; ref != nil {
		configMap, err := core.ConfigMaps(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", volume.Name, err)
		}
		for key, value := range configMap.Data {
			data[key] = []byte(value)
		}
		items = ref.Items
	} else {
		ref := volume.Secret
		secret, err := core.Secrets(namespace).Get(ctx, ref.SecretName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", volume.Name, err)
		}
		data = secret.Data
		items = ref.Items
	}
	if len(items) == 0 {
		return data, nil
	}
	files := map[string][]byte{}
	for _, item := range items {
		if value, ok := data[item.Key]; ok {
			files[item.Path] = value
		}
	}
	return files, nil
}

func makeOwnedDir(path string, uid, gid int) error {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return err
	}
	return os.Chown(path, uid, gid)
}

// writeFiles replaces the directory's files with these, as the kubelet refreshes a volume.
func writeFiles(directory string, files map[string][]byte) error {
	if err := os.MkdirAll(directory, 0o755); err != nil {
		return err
	}
	for path, content := range files {
		target := filepath.Join(directory, filepath.Clean("/"+path))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := replaceFile(target, content); err != nil {
			return err
		}
	}
	return nil
}

// replaceFile writes content to target atomically. The file aside has a name of its own:
// two execs into one pod at once both refresh its volumes, and with one shared name the
// second rename found its file already moved (ENOENT) and failed that exec.
func replaceFile(target string, content []byte) error {
	aside, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".writing-*")
	if err != nil {
		return err
	}
	name := aside.Name()
	_, err = aside.Write(content)
	if closeErr := aside.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Chmod(name, 0o644)
	}
	if err == nil {
		err = os.Rename(name, target)
	}
	if err != nil {
		_ = os.Remove(name)
	}
	return err
}

// collectGarbage removes the directories of pods that no longer exist.
func (p *podRunner) collectGarbage(ctx context.Context, every time.Duration) {
	for {
		time.Sleep(every)
		list, err := p.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			continue
		}
		live := map[string]bool{}
		for _, pod := range list.Items {
			live[string(pod.UID)] = true
		}
		entries, _ := os.ReadDir(p.podsDir)
		for _, entry := range entries {
			if !live[entry.Name()] {
				_ = os.RemoveAll(filepath.Join(p.podsDir, entry.Name()))
			}
		}
	}
}

// enter runs in the child: uid gid groups source=target... -- command...
func enter(args []string) {
	fail := func(format string, values ...any) {
		fmt.Fprintf(os.Stderr, "podexec: "+format+"\n", values...)
		os.Exit(126)
	}
	if len(args) < 4 {
		fail("enter: not enough arguments")
	}
	uid, _ := strconv.Atoi(args[0])
	gid, _ := strconv.Atoi(args[1])
	groups := splitInts(args[2])
	rest := args[3:]
	separator := -1
	for i, arg := range rest {
		if arg == "--" {
			separator = i
			break
		}
	}
	if separator < 0 || separator == len(rest)-1 {
		fail("enter: no command")
	}
	for _, pair := range rest[:separator] {
		source, target, _ := strings.Cut(pair, "=")
		if err := os.MkdirAll(target, 0o755); err != nil {
			fail("mount point %s: %v", target, err)
		}
		if err := syscall.Mount(source, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			fail("bind %s on %s: %v", source, target, err)
		}
	}
	command := rest[separator+1:]
	if err := os.Chdir("/workspace"); err != nil {
		fail("chdir /workspace: %v", err)
	}
	if err := syscall.Setgroups(groups); err != nil {
		fail("setgroups: %v", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		fail("setgid: %v", err)
	}
	if err := syscall.Setuid(uid); err != nil {
		fail("setuid: %v", err)
	}
	path := command[0]
	if !strings.Contains(path, "/") {
		found, err := lookPath(path, os.Getenv("PATH"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: command not found\n", path)
			os.Exit(127)
		}
		path = found
	}
	err := syscall.Exec(path, command, os.Environ())
	fail("exec %s: %v", command[0], err)
}

func lookPath(name, path string) (string, error) {
	for _, directory := range filepath.SplitList(path) {
		candidate := filepath.Join(directory, name)
		if info, err := os.Stat(candidate); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", os.ErrNotExist
}

func joinInts(values []int) string {
	parts := make([]string, len(values))
	for i, value := range values {
		parts[i] = strconv.Itoa(value)
	}
	return strings.Join(parts, ",")
}

func splitInts(text string) []int {
	var values []int
	for _, part := range strings.Split(text, ",") {
		if value, err := strconv.Atoi(part); err == nil {
			values = append(values, value)
		}
	}
	return values
}
